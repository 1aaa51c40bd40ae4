"""The writer's side of the inbox streams: the consumer groups, reading, acknowledging.

The writer reads ``memq:inbox`` (agents), ``memq:inbox:worker`` and ``memq:inbox:admin``
with one XREADGROUP, each through its own consumer group of the same name. Entries of a
read are applied in the order of their ids (Redis stamps every stream from one clock), so
what one client sent stays in order, and sends of different roles interleave as they came.

A :class:`Prefetcher` reads and validates the next batch in a thread while the writer
commits the current one: validation is Python work and a commit is mostly SQLite and
fsync, which run without the GIL, so on two cores the two overlap.
"""

from __future__ import annotations

import contextlib
import logging
import queue
import threading
import time
from collections import defaultdict
from collections.abc import Mapping, Sequence
from typing import Any

import redis

from memq import metrics, names
from memq.broker import TRANSIENT
from memq.clock import now_rfc3339
from memq.config import Config
from memq.inbox import plausible, stream_position
from memq.logs import log
from memq.rejections import MAX_REPORTED, REPORT_TTL_S, Rejection
from memq.store.write import batch
from memq.store.write.batch import Entry

logger = logging.getLogger("memq.writer")


STREAMS = names.INBOX_STREAMS


class Inbox:
    def __init__(self, broker: redis.Redis, config: Config) -> None:
        self.redis = broker
        self.batch_size = config.writer.batch_size
        self.block_ms = config.writer.block_ms
        self._committed: dict[str, tuple[int, int]] = {}
        """The commit position last written per stream, so it only ever moves forward."""
        self.retention_ms = int(config.replication.inbox_retention_s * 1000)
        """How long acknowledged entries stay (0: deleted as they are acknowledged). A
        replica of the database lags behind it: a copy restored from it applies again what
        the inbox still holds beyond its recorded position (store/write/positions.py)."""

    def ensure_group(self) -> None:
        for stream in STREAMS:
            try:
                # From "0", not "$": entries sent before the first writer ever ran are kept.
                self.redis.xgroup_create(stream, names.WRITER_GROUP, id="0", mkstream=True)
            except redis.exceptions.ResponseError as exc:
                if "BUSYGROUP" not in str(exc):
                    raise

    def read_pending(self, after: Mapping[str, str] | None = None) -> list[Entry]:
        """Entries delivered to the writer but never acknowledged, with ids after ``after``
        (per stream; every stream from the start when not given)."""
        return self._read(after or dict.fromkeys(STREAMS, "0"), block_ms=None)

    def claim_stale(self, min_idle_ms: int = 60_000) -> list[Entry]:
        """Entries pending for longer than ``min_idle_ms``: delivered but never committed.

        A batch in hand is committed within milliseconds, so an entry idle this long was
        lost between delivery and commit (for example Redis restarted from an append-only
        file that did not yet hold its acknowledgement). Claiming is idempotent.
        """
        entries = []
        for stream in STREAMS:
            try:
                reply: Any = self.redis.xautoclaim(
                    stream, names.WRITER_GROUP, names.WRITER_CONSUMER, min_idle_ms,
                    start_id="0-0", count=self.batch_size,
                )
            except redis.exceptions.ResponseError as exc:
                if "NOGROUP" in str(exc):
                    continue  # nothing was ever read from it (the prefetcher recreates it)
                raise
            entries += [Entry(stream, *item) for item in reply[1] if item and item[1] is not None]
        return _in_order(entries)

    def read_new(self) -> list[Entry]:
        return self._read(dict.fromkeys(STREAMS, ">"), block_ms=self.block_ms)

    def _read(self, starts: Mapping[str, str], block_ms: int | None) -> list[Entry]:
        """Up to ``batch_size`` entries of each stream, in id order."""
        streams: dict[Any, Any] = dict(starts)
        reply: Any = self.redis.xreadgroup(
            names.WRITER_GROUP, names.WRITER_CONSUMER, streams, self.batch_size,
            block=block_ms,
        )
        entries = [Entry(_text(stream), entry_id, fields)
                   for stream, items in reply or () for entry_id, fields in items]
        return _in_order(entries) if len(reply or ()) > 1 else entries

    def report_stall(self, reason: str) -> None:
        """Say why nothing is being committed, and that the writer is alive all the same;
        best effort (Redis may be the reason)."""
        now = now_rfc3339()
        pipe = self.redis.pipeline(transaction=True)
        pipe.set(names.WRITER_STALLED_KEY, f"{now} {reason}", ex=600)
        pipe.set(names.WRITER_HEARTBEAT_KEY, now, ex=60)
        try:
            pipe.execute()
        except (*TRANSIENT, redis.exceptions.ResponseError):
            pass

    def heartbeat(self) -> None:
        """An idle writer still says it is alive (`memq status`, `memq up`)."""
        self.redis.set(names.WRITER_HEARTBEAT_KEY, now_rfc3339(), ex=60)

    def flatline(self) -> None:
        """Take the heartbeat away at once (a writer that failed); best effort."""
        try:
            self.redis.delete(names.WRITER_HEARTBEAT_KEY)
        except (*TRANSIENT, redis.exceptions.ResponseError):
            pass

    def acknowledge(
        self, entries: list[Entry], figures: metrics.BatchFigures | None = None,
        reports: Sequence[tuple[str, Rejection]] = (),
    ) -> bool:
        """Ack and delete the entries, move the commit positions, report the rejections to
        their senders, record the figures: atomically, so a client that sees its entry
        committed also sees its rejection, and the numbers only move for committed batches.
        True if it deleted entries whose ids Redis could not have made (the stream is then
        to be brought back: :meth:`repair_ids`)."""
        ids: dict[str, list[bytes]] = defaultdict(list)
        for entry in entries:
            ids[entry.stream].append(entry.id)
        pipe = self.redis.pipeline(transaction=True)
        moved = {}
        implausible = False
        for stream, stream_ids in ids.items():
            pipe.xack(stream, names.WRITER_GROUP, *stream_ids)
            kept = [i for i in stream_ids if plausible(stream_position(i))]
            # An id Redis could not have made goes now, whatever the retention: until it
            # does, the stream's last id cannot be brought back (see repair_ids).
            gone = stream_ids if not self.retention_ms else [
                i for i in stream_ids if i not in kept]
            if gone:
                pipe.xdel(stream, *gone)
            implausible = implausible or len(kept) < len(stream_ids)
            last = max((stream_position(i) for i in kept), default=(0, 0))
            if last > self._committed.get(stream, (0, 0)):
                # Entries reclaimed late are older than what is committed: no step back.
                pipe.set(names.COMMITTED_KEYS[stream], f"{last[0]}-{last[1]}")
                moved[stream] = last
        _move_ordinals(pipe, entries)
        _move_key_counts(pipe, entries)
        for sender, rejection in reports:
            key = names.rejections_key(sender)
            fields: dict[Any, Any] = rejection.to_fields()  # (redis' own type is invariant)
            pipe.xadd(key, fields, maxlen=MAX_REPORTED, approximate=True)
            pipe.expire(key, REPORT_TTL_S)
        pipe.set(names.WRITER_HEARTBEAT_KEY, now_rfc3339(), ex=60)
        pipe.delete(names.WRITER_STALLED_KEY)
        if figures is not None:
            metrics.record_batch(pipe, figures)
        pipe.execute()
        self._committed.update(moved)
        return implausible

    def repair_ids(self) -> list[str]:
        """Bring back a stream whose last id Redis could not have made (an id a sender
        chose, from before the relay or on the admin's stream), once its entries with such
        ids are set aside and deleted: without this, an id at the top of the id space leaves
        every later XADD refused, and one in the future drags every later id there. The
        stream's last id, and the writer group's, go back to its top entry (or 0-0).
        Returns the streams repaired."""
        repaired = []
        for stream in STREAMS:
            try:
                info: Any = self.redis.xinfo_stream(stream)
            except redis.exceptions.ResponseError:
                continue  # no such stream
            if plausible(stream_position(info["last-generated-id"])):
                continue
            top: Any = self.redis.xrevrange(stream, count=1)
            base = _text(top[0][0]) if top else "0-0"
            if not plausible(stream_position(base)):
                continue  # not all set aside yet: the next pass
            self.redis.execute_command(  # type: ignore[no-untyped-call]
                "XSETID", stream, base, "MAXDELETEDID", base)
            self.redis.xgroup_setid(stream, names.WRITER_GROUP, base)
            log(logger, "stream ids brought back into range", logging.WARNING,
                stream=stream, last_id=base)
            repaired.append(stream)
        return repaired

    def trim(self) -> None:
        """Drop acknowledged entries older than the retention window (with a replica).

        Never an entry that is not acknowledged: the cut stays at or below the commit
        position and the oldest pending entry, whatever the backlog's age.
        """
        if not self.retention_ms:
            return
        cut = (int(time.time() * 1000) - self.retention_ms, 0)
        for stream, committed in self._committed.items():
            bound = min(cut, committed, self._oldest_pending(stream) or committed)
            self.redis.xtrim(stream, minid=f"{bound[0]}-{bound[1]}", approximate=False)

    def _oldest_pending(self, stream: str) -> tuple[int, int] | None:
        summary: Any = self.redis.xpending(stream, names.WRITER_GROUP)
        oldest = summary.get("min") if summary else None
        return stream_position(oldest) if oldest else None

    def delivered(self) -> dict[str, tuple[int, int]]:
        """Per stream, the last entry the writer's group was ever given (absent: none)."""
        marks = {}
        for stream in STREAMS:
            try:
                groups: Any = self.redis.xinfo_groups(stream)
            except redis.exceptions.ResponseError:
                continue  # no such stream: nothing was ever sent on it
            for group in groups:
                if _text(group["name"]) == names.WRITER_GROUP:
                    marks[stream] = stream_position(group["last-delivered-id"])
        return marks

    def read_range(self, after: Mapping[str, tuple[int, int]],
                   upto: Mapping[str, tuple[int, int]]) -> list[Entry]:
        """Entries after ``after`` and up to ``upto`` (per stream), whatever their state,
        in id order: up to ``batch_size`` of each stream, cut where the first full one
        stops, so that no stream's later entries pass another's earlier ones."""
        entries, full = [], []
        for stream, start in after.items():
            items: Any = self.redis.xrange(
                stream, min=f"({start[0]}-{start[1]}",
                max=f"{upto[stream][0]}-{upto[stream][1]}", count=self.batch_size)
            entries += [Entry(stream, entry_id, fields) for entry_id, fields in items]
            if len(items) == self.batch_size:
                full.append(stream_position(items[-1][0]))
        cut = min(full, default=None)
        return [e for e in _in_order(entries) if cut is None or stream_position(e.id) <= cut]

    def oldest(self, stream: str) -> tuple[int, int] | None:
        """The id of the oldest entry the stream still holds."""
        first: Any = self.redis.xrange(stream, count=1)
        return stream_position(first[0][0]) if first else None

    def committed(self) -> dict[str, tuple[int, int]]:
        return dict(self._committed)

    def load_committed(self) -> None:
        """Where each stream's commit position stands (at start)."""
        values = self.redis.mget([names.COMMITTED_KEYS[s] for s in STREAMS])
        self._committed = {s: stream_position(v) for s, v in zip(STREAMS, values, strict=True)
                           if v is not None}


def _move_ordinals(pipe: Any, entries: list[Entry]) -> None:
    """Set each queue's committed ordinal to the largest its relayed entries carry. A MAX in
    Lua, not a SET: a batch of reclaimed entries must not move it back."""
    last: dict[str, int] = {}
    for entry in entries:
        if entry.stream not in names.INBOX_QUEUES:
            continue
        value = (entry.fields or {}).get(names.ORDINAL_FIELD, b"")
        if value.isdigit() and len(value) <= 18:
            last[entry.stream] = max(last.get(entry.stream, 0), int(value))
    for stream, ordinal in last.items():
        pipe.eval(_RAISE_TO, 1, names.COMMITTED_ORDINAL_KEYS[stream], f"{ordinal}-0")


def _move_key_counts(pipe: Any, entries: list[Entry]) -> None:
    """For the keys' queue, each key's count of its items committed, as a position of the
    queue (:data:`memq.names.KEY_POSITION_BASE` on): the largest its entries carry
    (relayed in its order, so every one below it is committed too)."""
    last: dict[str, int] = {}
    for entry in entries:
        fields = entry.fields or {}
        value, sender = fields.get(names.KEY_SEQ_FIELD, b""), fields.get(names.SENDER_FIELD)
        if entry.stream == names.KEYS_INBOX_STREAM and value.isdigit() and len(value) <= 18 \
                and sender:
            key = names.key_count(sender.decode(errors="replace"), "committed")
            last[key] = max(last.get(key, 0), int(value))
    for key, count in last.items():
        if len(key) <= MAX_KEY_BYTES:
            pipe.eval(_RAISE_TO, 1, key, f"{names.KEY_POSITION_BASE + count}-0")


MAX_KEY_BYTES = 200
"""A count's Redis key longer than any a key's id makes (a delegated token's narrowing,
which may be long, is not part of it) names no key."""

_RAISE_TO = """
local old = tonumber(string.match(redis.call('GET', KEYS[1]) or '0-0', '^(%d+)') or '0')
local new = tonumber(string.match(ARGV[1], '^(%d+)'))
if new > old then redis.call('SET', KEYS[1], ARGV[1]) end
"""


def _in_order(entries: list[Entry]) -> list[Entry]:
    return sorted(entries, key=lambda entry: stream_position(entry.id))


def _text(value: bytes | str) -> str:
    return value.decode() if isinstance(value, bytes) else value


Prefetched = tuple[list[Entry], list[batch.Decoded]]


def _still_pending(entries: list[Entry]) -> dict[str, str] | None:
    """Where to go on reading pending entries: after the last one read of each stream that
    still gave some (None once none did)."""
    after = {entry.stream: entry.id.decode() for entry in entries}  # the last one wins
    return after or None


class Prefetcher(threading.Thread):
    """Reads and decodes new entries ahead of the writer, at most :data:`AHEAD` batches."""

    AHEAD = 3

    def __init__(self, inbox: Inbox, config: Config, stop: threading.Event) -> None:
        super().__init__(name="memq-inbox-prefetch", daemon=True)
        self.inbox = inbox
        self.limits = config.limits
        self.stop = stop
        self.ready: queue.Queue[Prefetched] = queue.Queue(maxsize=self.AHEAD)

    failure: BaseException | None = None
    """What killed the thread, if something did (the writer then stops: see Writer.run)."""

    def run(self) -> None:
        try:
            self._read_until_stopped()
        except BaseException as exc:  # kept: the writer's thread raises it (Writer.run)
            self.failure = exc
            logger.critical("the inbox reader died; the writer stops", exc_info=exc)
        finally:
            # Wakes a writer waiting in get(), which would otherwise sleep out its timeout
            # before it sees the stop (0.2 s of every stop: tests/producers took 17% less
            # time without it); a full queue needs no wake: the writer is not waiting on it.
            with contextlib.suppress(queue.Full):
                self.ready.put_nowait(([], []))

    def _read_until_stopped(self) -> None:
        delay = 0.1
        # After a broken connection, Redis may have delivered entries whose reply never
        # arrived (they sit pending under our name); read those again before new ones, or
        # they would wait for the stale-entry pass while later entries commit past them.
        pending_after: dict[str, str] | None = None
        while not self.stop.is_set():
            try:
                if pending_after is None:
                    entries = self.inbox.read_new()
                else:
                    entries = self.inbox.read_pending(after=pending_after)
                    pending_after = _still_pending(entries)
                delay = 0.1
            except (*TRANSIENT, redis.exceptions.ResponseError) as exc:
                self._on_error(exc)
                self.stop.wait(delay)
                delay = min(5.0, delay * 2)
                pending_after = dict.fromkeys(STREAMS, "0")
                continue
            if entries:
                self._put((entries, batch.decode_entries(entries, self.limits)))

    def _put(self, item: Prefetched) -> None:
        while not self.stop.is_set():
            try:
                self.ready.put(item, timeout=0.2)
                return
            except queue.Full:
                continue

    def _on_error(self, exc: Exception) -> None:
        if "NOGROUP" in str(exc):
            # Redis came back without our stream (restarted without persistence).
            log(logger, "consumer group missing; recreating", logging.WARNING)
            try:
                self.inbox.ensure_group()
            except (*TRANSIENT, redis.exceptions.ResponseError):
                pass
            return
        log(logger, "redis unavailable, retrying", logging.WARNING, error=str(exc))

    def get(self, timeout: float) -> Prefetched | None:
        """The next batch, joined by those already read behind it (a group commit).

        Under a backlog, one transaction then covers up to :data:`AHEAD` batches, and its
        fsync is paid once for all of them; at a trickle nothing waits behind, and a batch
        is committed alone, as soon as it is read. Entries stay in stream order.
        """
        try:
            entries, decoded = self.ready.get(timeout=timeout)
        except queue.Empty:
            return None
        if not entries:  # the wake at the reader's end (see run)
            return None
        for _ in range(self.AHEAD - 1):
            try:
                more_entries, more_decoded = self.ready.get_nowait()
            except queue.Empty:
                break
            entries, decoded = entries + more_entries, decoded + more_decoded
        return entries, decoded
