"""The Redis boundary: connecting, and translating Redis errors into :class:`BrokerError`.

This is the one module of ``memq/`` that imports redis: every role talks to the same
broker, and its errors must read the same everywhere (with credentials redacted).
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable, Iterable, Iterator, Sequence
from contextlib import contextmanager
from typing import Any, TypeVar

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

from memq import names
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
    url = config.redis_url
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


Position = tuple[int, int]
"""Where an entry stands in what its sender writes to, comparable within one inbox: a
stream entry id as (milliseconds, sequence) for the admin's stream, (ordinal, 0) for an
agent's or worker's queue (see :data:`memq.names.INBOX_QUEUES`)."""


def queue_item(raw: bytes, sender: str | None = None, *, counted: bool = False) -> bytes:
    """One queue item: the sender id, a newline, the wire event (which, compact JSON, holds
    no newline of its own); the relay splits it into the entry's fields. ``counted``: the
    push counted it for its key (the keys' queue: :data:`memq.names.COUNTED_MARK`)."""
    return (names.COUNTED_MARK if counted else b"") + (sender or "").encode() + b"\n" + raw


def add_to_inbox(pipe: Any, stream: str, raws: Sequence[bytes], sender: str | None = None
                 ) -> None:
    """Queue the commands that send ``raws`` to ``stream``'s inbox on ``pipe``: one RPUSH to
    its queue where it has one (agents, workers), else one XADD each (admin)."""
    queue = names.INBOX_QUEUES.get(stream)
    if queue is not None:
        counted = stream == names.KEYS_INBOX_STREAM
        pipe.rpush(queue, *(queue_item(raw, sender, counted=counted) for raw in raws))
        return
    for raw in raws:
        pipe.xadd(stream, inbox_fields(raw, sender))


def send_to_inbox(
    connection: redis.Redis, raws: Sequence[bytes], stream: str = names.INBOX_STREAM,
    sender: str | None = None, *, replicas: int = 0, wait_timeout_s: float = 1.0,
) -> list[Position]:
    """Send wire events to an inbox in one round trip; returns their positions.

    ``sender`` (see :mod:`memq.rejections`) is where the writer reports those it rejects.
    With ``replicas``, WAIT on the same connection until that many replicas have the
    entries, or raise :class:`NotReplicated` after ``wait_timeout_s``. A fresh pipeline
    per call, so a retry never resends a failed one's half-sent commands.
    """
    # WAIT covers the writes of its own connection: one connection for both.
    single = connection.client() if replicas else connection  # type: ignore[no-untyped-call, unused-ignore]
    try:
        pipe = single.pipeline(transaction=stream in names.INBOX_QUEUES)
        _push(pipe, stream, raws, sender)
        positions = _positions(stream, list(pipe.execute()), len(raws))
        if replicas:
            _confirm(int(single.execute_command(  # type: ignore[no-untyped-call, unused-ignore]
                "WAIT", replicas, max(1, round(wait_timeout_s * 1000)))),
                len(raws), replicas, wait_timeout_s)
        return positions
    finally:
        if replicas:
            single.close()


async def send_to_inbox_async(
    connection: redis.asyncio.Redis, raws: Sequence[bytes], stream: str, sender: str, *,
    replicas: int = 0, wait_timeout_s: float = 1.0,
) -> list[Position]:
    """:func:`send_to_inbox` for asyncio."""
    single = connection.client() if replicas else connection
    try:
        pipe = single.pipeline(transaction=stream in names.INBOX_QUEUES)
        _push(pipe, stream, raws, sender)
        positions = _positions(stream, list(await pipe.execute()), len(raws))
        if replicas:
            _confirm(int(await single.execute_command(  # type: ignore[no-untyped-call, unused-ignore]
                "WAIT", replicas, max(1, round(wait_timeout_s * 1000)))),
                len(raws), replicas, wait_timeout_s)
        return positions
    finally:
        if replicas:
            await single.aclose()


def _push(pipe: Any, stream: str, raws: Sequence[bytes], sender: str | None) -> None:
    """A queue's push reads, in the same MULTI, how many items the relay has moved: the
    items ahead of the pushed ones are exactly the list's other ones. The keys' queue is
    relayed key by key in turn (store/write/relay.py): there, a push counts its key's own
    items instead (:data:`memq.names.KEY_SEQ_FIELD`)."""
    if stream == names.KEYS_INBOX_STREAM:
        pipe.incrby(names.key_count(sender or "", "pushed"), len(raws))
    elif stream in names.INBOX_QUEUES:
        pipe.get(names.RELAYED_KEYS[stream])
    add_to_inbox(pipe, stream, raws, sender)


def _positions(stream: str, replies: list[Any], sent: int) -> list[Position]:
    if stream == names.KEYS_INBOX_STREAM:
        first = names.KEY_POSITION_BASE + int(replies[0]) - sent + 1
        return [(first + i, 0) for i in range(sent)]
    if stream not in names.INBOX_QUEUES:
        return [stream_position(reply) for reply in replies]
    relayed, length = int(replies[0] or 0), int(replies[1])
    first = relayed + length - sent + 1
    return [(first + i, 0) for i in range(sent)]


def _confirm(confirmed: int, sent: int, replicas: int, wait_timeout_s: float) -> None:
    """:class:`NotReplicated` if the WAIT after a send fell short."""
    if confirmed < replicas:
        raise NotReplicated(
            f"{sent} inbox entries reached the Redis master but only {confirmed} of "
            f"{replicas} replicas confirmed them within {wait_timeout_s:g} s: a failover "
            "now could lose them ([client] wait_replicas)")


def inbox_marks(connection: redis.Redis) -> dict[str, Position]:
    """Per inbox stream, the id of the last entry ever added to it, and per queue, the
    ordinal of the last item ever pushed (absent: none yet); read in one MULTI, so an item
    the relay moves meanwhile is counted once."""
    pipe = connection.pipeline(transaction=True)
    for stream in names.INBOX_STREAMS:
        pipe.exists(stream)
    _ask_queue_ends(pipe, names.INBOX_QUEUES)
    replies = pipe.execute()
    ends = _queue_ends(replies[len(names.INBOX_STREAMS):])
    marks: dict[str, Position | None] = {
        queue: (end, 0) for queue, end in zip(names.INBOX_QUEUES.values(), ends, strict=True)
        if end}
    present = [s for s, n in zip(names.INBOX_STREAMS, replies, strict=False) if n]
    if present:
        pipe = connection.pipeline(transaction=False)
        for stream in present:
            pipe.xinfo_stream(stream)
        for stream, info in zip(present, pipe.execute(), strict=True):
            mark = stream_position(info["last-generated-id"])
            marks[stream] = mark if plausible(mark) else _plausible_top(connection, stream)
    return {name: mark for name, mark in marks.items() if mark is not None}


def _plausible_top(connection: redis.Redis, stream: str) -> Position | None:
    """The last entry of a stream whose last id a sender chose: the writer sets such ids
    aside and never commits them, so waiting for one would never end."""
    limit = int(time.time() * 1000) + FUTURE_TOLERANCE_MS
    top: Any = connection.xrevrange(stream, max=f"{limit}-{MAX_ID_PART}", count=1)
    return stream_position(top[0][0]) if top else None


def _ask_queue_ends(pipe: Any, streams: Iterable[str]) -> None:
    """Queue, for each of these streams' queues, the reads of how far it reaches: the
    items the relay moved, and those still in the list (in a MULTI, so none counts twice)."""
    for stream in streams:
        pipe.get(names.RELAYED_KEYS[stream])
        pipe.llen(names.INBOX_QUEUES[stream])


def _queue_ends(replies: list[Any]) -> list[int]:
    """The last ordinal of each queue :func:`_ask_queue_ends` asked about (0: none yet)."""
    return [int(relayed or 0) + int(length)
            for relayed, length in zip(replies[::2], replies[1::2], strict=True)]


def key_end(connection: redis.Redis, sender: str) -> Position:
    """How far what was sent for the key of ``sender`` (a keys' queue sender field)
    reaches, as a position of the keys' queue."""
    pushed = connection.get(names.key_count(sender, "pushed"))
    return names.KEY_POSITION_BASE + int(pushed or 0), 0


def inbox_end(connection: redis.Redis, stream: str) -> Position:
    """How far what senders of ``stream`` sent reaches: its queue's last ordinal, or the
    stream's last id (admin). A position beyond it names nothing anyone sent."""
    if stream in names.INBOX_QUEUES:
        pipe = connection.pipeline(transaction=True)
        _ask_queue_ends(pipe, [stream])
        [end] = _queue_ends(pipe.execute())
        return end, 0
    try:
        info: Any = connection.xinfo_stream(stream)
    except redis.exceptions.ResponseError:
        return 0, 0  # no such stream: nothing was sent
    return stream_position(info["last-generated-id"])


def committed_marks(connection: redis.Redis) -> dict[str, Position]:
    """Per inbox stream, the id of the last entry the writer committed, and per queue, the
    ordinal of its last item the writer committed (absent: none yet)."""
    keys = {**{stream: names.COMMITTED_KEYS[stream] for stream in names.INBOX_STREAMS},
            **{names.INBOX_QUEUES[s]: names.COMMITTED_ORDINAL_KEYS[s] for s in names.INBOX_QUEUES}}
    values = connection.mget(list(keys.values()))
    return {name: stream_position(value)
            for name, value in zip(keys, values, strict=True) if value is not None}


def caught_up(committed: dict[str, Position], marks: dict[str, Position]) -> bool:
    """Has the writer committed everything up to ``marks``, in every stream and queue?"""
    return all(committed.get(name, (0, 0)) >= mark for name, mark in marks.items())


def inbox_fields(raw: bytes, sender: str | None = None) -> dict[Any, Any]:
    """The fields of one inbox entry: the wire event, and who sent it if known."""
    if sender is None:
        return {names.EVENT_FIELD: raw}
    return {names.EVENT_FIELD: raw, names.SENDER_FIELD: sender}


MAX_ID_PART = 2**63 - 1
"""The largest milliseconds or sequence part of a stream id memq records (SQLite's largest
integer). Redis takes up to 2^64 - 1 in each part from a sender that names the id."""


FUTURE_TOLERANCE_MS = 24 * 3600 * 1000
"""How far ahead of the writer's clock a stream id may be: Redis makes ids from its own
clock, which may run ahead a little; a day ahead, only a sender that chose the id put it
there, and every id Redis made after it would follow it there."""


def in_range(position: Position) -> bool:
    """Whether both parts of a stream id fit a SQLite integer (see :data:`MAX_ID_PART`)."""
    return 0 <= position[0] <= MAX_ID_PART and 0 <= position[1] <= MAX_ID_PART


def plausible(position: Position, now_ms: int | None = None) -> bool:
    """Whether Redis could have made this id itself: in range, and not from the future
    (see :data:`FUTURE_TOLERANCE_MS`)."""
    now_ms = int(time.time() * 1000) if now_ms is None else now_ms
    return in_range(position) and position[0] <= now_ms + FUTURE_TOLERANCE_MS


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
