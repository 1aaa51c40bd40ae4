"""The Redis boundary: connecting, and translating Redis errors into :class:`BrokerError`.

This is the one module of ``memq/`` that imports redis: every role talks to the same
broker, and its errors must read the same everywhere (with credentials redacted).
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from typing import TypeVar

import redis
from redis.backoff import NoBackoff
from redis.retry import Retry

from memq import names
from memq.errors import BrokerError, ConfigError
from memq.logs import redact_url

TRANSIENT = (redis.exceptions.ConnectionError, redis.exceptions.TimeoutError)
"""Errors after which a retry may succeed (Redis restarting, a network blip)."""

REFUSED = (redis.exceptions.AuthenticationError, redis.exceptions.AuthorizationError)
"""Connection errors that another try will not fix: the credentials were refused."""

FIRST_RETRY_DELAY_S = 0.05
MAX_RETRY_DELAY_S = 1.0
"""Backoff between attempts while Redis is unreachable: 50 ms, doubling, at most 1 s."""

T = TypeVar("T")


def is_transient(exc: BaseException) -> bool:
    """A Redis error worth retrying: unreachable or restarting, not refused credentials."""
    return isinstance(exc, TRANSIENT) and not isinstance(exc, REFUSED)


def connect(
    url: str, *, timeout_s: float = 10.0, retries: int | None = None,
    client_name: str | None = None,
) -> redis.Redis:
    """A client for ``url`` (``redis://``, ``rediss://`` or ``unix://``); lazy, no I/O yet.

    TLS and its options come from the URL, as redis-py reads them: for example
    ``rediss://:password@host:6380/0?ssl_ca_certs=/path/ca.pem``. ``retries`` replaces
    redis-py's own retrying of a dropped connection (10 tries with backoff) by that many
    immediate ones, for callers that retry on their own terms. ``client_name`` is set on
    every connection, reconnections included (CLIENT SETNAME).
    """
    options: dict[str, object] = {}
    if retries is not None:
        options["retry"] = Retry(NoBackoff(), retries)
    try:
        return redis.Redis.from_url(
            url,
            socket_timeout=timeout_s,
            socket_connect_timeout=timeout_s,
            health_check_interval=30,
            client_name=client_name,
            **options,
        )
    except ValueError as exc:
        raise ConfigError(f"invalid Redis URL {redact_url(url)}: {exc}") from exc


@contextmanager
def translated(url: str, action: str) -> Iterator[None]:
    """Turn any Redis error raised inside into a :class:`BrokerError` naming ``action``."""
    try:
        yield
    except redis.exceptions.RedisError as exc:
        raise BrokerError(f"{action} failed at {redact_url(url)}: {exc}") from exc


def send_to_inbox(connection: redis.Redis, raws: Sequence[bytes]) -> list[bytes]:
    """XADD wire events to ``memq:inbox`` in one round trip; returns their entry ids.

    A fresh pipeline per call, so a retry never resends a failed one's half-sent commands.
    """
    pipe = connection.pipeline(transaction=False)
    for raw in raws:
        pipe.xadd(names.INBOX_STREAM, {names.EVENT_FIELD: raw})
    return list(pipe.execute())


def stream_position(stream_id: bytes | str) -> tuple[int, int]:
    """A stream entry id (``"1700000000000-3"``) as a comparable pair."""
    text = stream_id.decode() if isinstance(stream_id, bytes) else stream_id
    ms, _, seq = text.partition("-")
    return int(ms), int(seq or 0)


def retrying(
    url: str, action: str, call: Callable[[], T], *, retry_for_s: float,
    on_retry: Callable[[], None] | None = None,
) -> T:
    """``call()``, retried with backoff while Redis is unreachable for up to ``retry_for_s``.

    Only for calls that are safe to repeat: every event keeps its id, so a second copy of
    an XADD whose reply was lost is a no-op for the writer. Any other Redis error (a refused
    command, refused credentials) is raised at once, translated.
    """
    deadline = time.monotonic() + retry_for_s
    delay = FIRST_RETRY_DELAY_S
    while True:
        try:
            with translated(url, action):
                return call()
        except BrokerError as exc:
            if exc.__cause__ is None or not is_transient(exc.__cause__):
                raise
            if time.monotonic() + delay > deadline:
                raise BrokerError(
                    f"{action} failed: Redis at {redact_url(url)} did not answer for "
                    f"{retry_for_s:g} s ({exc.__cause__})") from exc.__cause__
        if on_retry is not None:
            on_retry()
        time.sleep(delay)
        delay = min(MAX_RETRY_DELAY_S, delay * 2)
