"""The Redis boundary: connecting, retrying, and translating Redis errors into
:class:`BrokerError`, so that they read the same in every role (credentials redacted).
What goes over it to the writer (the inbox's wire and positions) is :mod:`memq.inbox`.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable, Iterator
from contextlib import contextmanager
from typing import Any, TypeVar
from urllib.parse import unquote, urlsplit

import redis
import redis.asyncio
from redis.asyncio.retry import Retry as AsyncRetry
from redis.asyncio.sentinel import Sentinel as AsyncSentinel
from redis.asyncio.sentinel import SentinelManagedSSLConnection as AsyncSentinelSSLConnection
from redis.backoff import ExponentialBackoff, NoBackoff
from redis.connection import SSLConnection, parse_url
from redis.retry import Retry
from redis.sentinel import Sentinel, SentinelManagedConnection
from redis.utils import SENTINEL

from memq.config import Config, say_default
from memq.errors import BrokerError, ConfigError, PermissionDenied
from memq.logs import redact_url
from memq.redis_config import RedisConfig

TRANSIENT = (redis.exceptions.ConnectionError, redis.exceptions.TimeoutError)
"""Errors after which a retry may succeed (Redis restarting, a network blip)."""

REFUSED = (redis.exceptions.AuthenticationError, redis.exceptions.AuthorizationError)
"""Connection errors that another try will not fix: the credentials were refused."""

FIRST_RETRY_DELAY_S = 0.05
MAX_RETRY_DELAY_S = 1.0
"""Backoff between attempts while Redis is unreachable: 50 ms, doubling, at most 1 s."""

FAILOVER_RETRY = (ExponentialBackoff(cap=1.0, base=0.05), 20)
"""How a command of a Sentinel-managed client whose caller does not retry on its own (RQ
workers, rq-scheduler, the dashboard, the CLI) waits out a failover: reconnecting, each
time asking the sentinels for the master, after 50 ms, 100 ms, ... then every second."""

FAILOVER_WAIT_S = sum(FAILOVER_RETRY[0].compute(n) for n in range(1, FAILOVER_RETRY[1] + 1))
"""About 17.5 s: the longest :data:`FAILOVER_RETRY` waits: longer than a failover with Sentinel's
``down-after-milliseconds`` of a few seconds; after Sentinel's default (30 s), such a
process gives up, and ``memq up`` (or the process manager) restarts it."""

T = TypeVar("T")


class NotReplicated(BrokerError):
    """Entries the master took but fewer replicas than asked confirmed in time."""


def is_transient(exc: BaseException) -> bool:
    """A Redis error worth retrying: unreachable or restarting, not refused credentials."""
    return isinstance(exc, TRANSIENT) and not isinstance(exc, REFUSED)


def client_for(
    config: Config, *, timeout_s: float = 10.0, retries: int | None = None,
    client_name: str | None = None,
) -> redis.Redis:
    """The client every memq process (CLI, writer, workers, scheduler, dashboard, clients,
    ``memq serve``) reaches its Redis with: ``config.redis_url``, or, with ``[redis]
    sentinels``, the current master of ``[redis] service``, asked of the sentinels again on
    every new connection, so a failover is followed without a restart.
    """
    say_default(config.redis_url)
    return connect(config.redis_url, timeout_s=timeout_s, retries=retries,
                   client_name=client_name, sentinel=config.redis)


def check_database(url: str) -> str:
    """``url``, once the database after its host is a number (or absent): redis-py reads
    ``redis://host:6379/x`` as database 0, and memq would share another's keyspace."""
    if url.startswith(("redis://", "rediss://")):
        named = unquote(urlsplit(url).path).strip("/")
        if named and not (named.isascii() and named.isdigit()):
            raise ConfigError(f"invalid Redis URL {redact_url(url)}: the database after the "
                              f"host must be a number, got {named!r:.40}")
    return url


def connect(
    url: str, *, timeout_s: float = 10.0, retries: int | None = None,
    client_name: str | None = None, sentinel: RedisConfig | None = None,
) -> redis.Redis:
    """A client for ``url`` (``redis://``, ``rediss://`` or ``unix://``); lazy, no I/O yet.

    TLS and its options come from the URL, as redis-py reads them: for example
    ``rediss://:password@host:6380/0?ssl_ca_certs=/path/ca.pem``. ``retries`` sets how many
    immediate retries a command whose connection dropped gets, for callers that retry on
    their own terms. ``client_name`` is set on every connection, reconnections included
    (CLIENT SETNAME). With ``sentinel`` naming sentinels, the URL gives the credentials,
    database and TLS, the sentinels the address; without ``retries``, a command then waits
    out a failover for up to about :data:`FAILOVER_WAIT_S` (see :data:`FAILOVER_RETRY`).
    """
    check_database(url)
    options: dict[str, Any] = {
        "socket_timeout": timeout_s, "socket_connect_timeout": timeout_s,
        "health_check_interval": 30, "client_name": client_name,
    }
    if retries is not None:
        options["retry"] = Retry(NoBackoff(), retries)
    try:
        if sentinel is not None and sentinel.sentinels:
            options.setdefault("retry", Retry(*FAILOVER_RETRY))
            return _sentinel_master(url, sentinel, options)
        return redis.Redis.from_url(url, **options)
    except ValueError as exc:
        raise ConfigError(f"invalid Redis URL {redact_url(url)}: {exc}") from exc


def connect_async(
    config: Config, *, timeout_s: float = 10.0, retries: int | None = None,
) -> redis.asyncio.Redis:
    """:func:`client_for` for asyncio (redis.asyncio): ``config.redis_url``, or the master
    the ``[redis] sentinels`` name; lazy, no I/O yet."""
    url = check_database(config.redis_url)
    options: dict[str, Any] = {
        "socket_timeout": timeout_s, "socket_connect_timeout": timeout_s,
        "health_check_interval": 30,
    }
    if retries is not None:
        options["retry"] = AsyncRetry(NoBackoff(), retries)
    try:
        if config.redis.sentinels:
            return _async_sentinel_master(url, config.redis, options)
        return redis.asyncio.Redis.from_url(url, **options)
    except ValueError as exc:
        raise ConfigError(f"invalid Redis URL {redact_url(url)}: {exc}") from exc


def _async_sentinel_master(url: str, sentinel: RedisConfig, options: dict[str, Any]
                           ) -> redis.asyncio.Redis:
    """:func:`_sentinel_master` for asyncio: redis.asyncio's own Sentinel connections."""
    options.setdefault("retry", AsyncRetry(*FAILOVER_RETRY))
    target = _sentinel_target(url)
    tls = target.pop("connection_class") is _SentinelSSLConnection
    if tls:
        target["connection_class"] = AsyncSentinelSSLConnection
    manager = AsyncSentinel(  # type: ignore[no-untyped-call, unused-ignore]
        sentinel.sentinel_addresses(),
        sentinel_kwargs=_sentinel_options(sentinel, options["socket_timeout"]))
    master: redis.asyncio.Redis = manager.master_for(sentinel.service, **target, **options)
    return master


def replicas_of(config: Config, *, timeout_s: float = 10.0) -> list[redis.Redis]:
    """A client of each replica the sentinels know for ``[redis] service`` (none without
    sentinels), with the URL's credentials: for what Redis does not replicate, ACL users."""
    if not config.redis.sentinels:
        return []
    target = _sentinel_target(config.redis_url)
    tls = target.pop("connection_class") is _SentinelSSLConnection
    target["connection_class"] = SSLConnection if tls else redis.Connection
    manager = _sentinels(config.redis, timeout_s)
    found = manager.discover_slaves(config.redis.service)  # type: ignore[no-untyped-call, unused-ignore]
    return [redis.Redis(connection_pool=redis.ConnectionPool(
                host=host, port=port, socket_timeout=timeout_s,
                socket_connect_timeout=timeout_s, **target))
            for host, port in found]


def sentinel_view(config: Config, *, timeout_s: float = 5.0) -> dict[str, Any] | None:
    """Whom the sentinels name master of ``[redis] service``, and its replicas (None without
    sentinels); raises :class:`BrokerError` when none of them answers."""
    if not config.redis.sentinels:
        return None
    manager = _sentinels(config.redis, timeout_s)
    service = config.redis.service
    with translated(f"redis+sentinel://{service}", "asking the sentinels for the master"):
        host, port = manager.discover_master(service)  # type: ignore[no-untyped-call, unused-ignore]
        replicas = manager.discover_slaves(service)  # type: ignore[no-untyped-call, unused-ignore]
    return {"service": service, "master": f"{host}:{port}", "replicas": len(replicas),
            "sentinels": list(config.redis.sentinels)}


def _sentinel_master(url: str, sentinel: RedisConfig, options: dict[str, Any]) -> redis.Redis:
    """A client of the master the sentinels name; each new connection asks them again."""
    manager = _sentinels(sentinel, options["socket_timeout"])
    master: redis.Redis = manager.master_for(  # type: ignore[no-untyped-call, unused-ignore]
        sentinel.service, **_sentinel_target(url), **options)
    return master


def _sentinel_target(url: str) -> dict[str, Any]:
    """What the URL says besides where: credentials, database, TLS and its options."""
    target: dict[str, Any] = parse_url(url)  # type: ignore[no-untyped-call, unused-ignore]
    if "path" in target:
        raise ConfigError(f"a Unix socket URL ({redact_url(url)}) cannot go with [redis] "
                          "sentinels: the sentinels say where the master is")
    for key in ("host", "port"):
        target.pop(key, None)
    tls = target.pop("connection_class", None) is SSLConnection
    target["connection_class"] = _SentinelSSLConnection if tls else _SentinelConnection
    return target


class _SentinelConnection(SentinelManagedConnection):
    """redis-py's connection to the master the sentinels name, except that a read cut short
    by anything (an exception a signal handler raises, as RQ's warm shutdown does inside a
    blocking dequeue) drops the connection, as a plain connection does. redis-py's keeps it
    (``disconnect_on_error=False``), and the pool hands it out again with the interrupted
    command's reply still to come: the next command reads that reply, or waits for it."""

    def read_response(  # type: ignore[no-untyped-def]
        self, disable_decoding: bool = False, *, timeout: float | object = SENTINEL,
        disconnect_on_error: bool | None = True, push_request: bool | None = False,
    ):
        return super().read_response(
            disable_decoding=disable_decoding, timeout=timeout,
            disconnect_on_error=disconnect_on_error, push_request=push_request)


class _SentinelSSLConnection(_SentinelConnection, SSLConnection):
    """The same, over TLS (``rediss://``)."""


def _sentinels(sentinel: RedisConfig, timeout_s: float) -> Sentinel:
    return Sentinel(  # type: ignore[no-untyped-call, unused-ignore]
        sentinel.sentinel_addresses(), sentinel_kwargs=_sentinel_options(sentinel, timeout_s))


def _sentinel_options(sentinel: RedisConfig, timeout_s: float) -> dict[str, Any]:
    return {"socket_timeout": timeout_s, "socket_connect_timeout": timeout_s,
            "username": sentinel.sentinel_username or None,
            "password": sentinel.sentinel_password or None}


@contextmanager
def translated(url: str, action: str) -> Iterator[None]:
    """Turn any Redis error raised inside into a :class:`BrokerError` naming ``action``;
    a command the ACL user may not run (NOPERM) into :class:`PermissionDenied`."""
    try:
        yield
    except redis.exceptions.NoPermissionError as exc:
        raise PermissionDenied(
            f"{action}: the Redis user of {redact_url(url)} may not do that ({exc})") from exc
    except redis.exceptions.RedisError as exc:
        raise BrokerError(f"{action} failed at {redact_url(url)}: {exc}") from exc


def retrying(
    url: str, action: str, call: Callable[[], T], *, retry_for_s: float,
    on_retry: Callable[[], None] | None = None,
) -> T:
    """``call()``, retried with backoff while Redis is unreachable for up to ``retry_for_s``.

    Only for calls that are safe to repeat: every event keeps its id, so a second copy of
    an XADD whose reply was lost is a no-op for the writer. :class:`NotReplicated` is
    retried too (the entries sent again, then waited for again: a replica reconnecting, or
    promoted and its old master back as its replica), and raised as it is at the deadline.
    Any other Redis error (a refused command, refused credentials) is raised at once,
    translated.
    """
    deadline = time.monotonic() + retry_for_s
    delay = FIRST_RETRY_DELAY_S
    while True:
        try:
            with translated(url, action):
                return call()
        except BrokerError as exc:
            _give_up_unless_retryable(exc, deadline - delay, url, action, retry_for_s)
        if on_retry is not None:
            on_retry()
        time.sleep(delay)
        delay = min(MAX_RETRY_DELAY_S, delay * 2)


async def retrying_async(
    url: str, action: str, call: Callable[[], Awaitable[T]], *, retry_for_s: float,
    on_retry: Callable[[], None] | None = None,
) -> T:
    """:func:`retrying` for asyncio: the backoff waits without blocking the loop."""
    deadline = time.monotonic() + retry_for_s
    delay = FIRST_RETRY_DELAY_S
    while True:
        try:
            with translated(url, action):
                return await call()
        except BrokerError as exc:
            _give_up_unless_retryable(exc, deadline - delay, url, action, retry_for_s)
        if on_retry is not None:
            on_retry()
        await asyncio.sleep(delay)
        delay = min(MAX_RETRY_DELAY_S, delay * 2)


def _give_up_unless_retryable(
    exc: BrokerError, last_try_before: float, url: str, action: str, retry_for_s: float
) -> None:
    """Raise ``exc`` unless another try may succeed and there is time for it: Redis was
    only unreachable, or too few replicas confirmed (raised as it is at the deadline).
    The one decision of :func:`retrying` and :func:`retrying_async`."""
    if isinstance(exc, NotReplicated):
        if time.monotonic() > last_try_before:
            raise exc
        return
    if exc.__cause__ is None or not is_transient(exc.__cause__):
        raise exc
    if time.monotonic() > last_try_before:
        raise BrokerError(
            f"{action} failed: Redis at {redact_url(url)} did not answer for "
            f"{retry_for_s:g} s ({exc.__cause__})") from exc.__cause__
