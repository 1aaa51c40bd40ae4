"""The inbox's wire: how events reach the writer's inbox streams and queues, and where
they stand in them (positions, marks, what the writer has committed).

Connecting and retrying are :mod:`memq.broker`'s; every role sends and waits through here.
"""

from __future__ import annotations

import time
from collections.abc import Iterable, Sequence
from typing import Any

import redis
import redis.asyncio

from memq import names
from memq.broker import NotReplicated

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
