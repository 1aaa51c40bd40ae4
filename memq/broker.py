"""The Redis boundary: connecting, and translating Redis errors into :class:`BrokerError`.

This is the one module of ``memq/`` that imports redis: every role talks to the same
broker, and its errors must read the same everywhere (with credentials redacted).
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

import redis

from memq.errors import BrokerError, ConfigError
from memq.logs import redact_url

TRANSIENT = (redis.exceptions.ConnectionError, redis.exceptions.TimeoutError)
"""Errors after which a retry may succeed (Redis restarting, a network blip)."""


def connect(url: str, *, timeout_s: float = 10.0, client_name: str | None = None) -> redis.Redis:
    """A client for ``url`` (``redis://``, ``rediss://`` or ``unix://``); lazy, no I/O yet.

    ``client_name`` is set on every connection, reconnections included (CLIENT SETNAME).
    """
    try:
        return redis.Redis.from_url(
            url,
            socket_timeout=timeout_s,
            socket_connect_timeout=timeout_s,
            health_check_interval=30,
            client_name=client_name,
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
