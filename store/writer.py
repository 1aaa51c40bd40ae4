"""The single writer: inbox entries in, one transaction per batch, acknowledged after commit.

Order of a batch, and why nothing is lost or duplicated:

1. read up to ``batch_size`` entries through the consumer group (first any still pending
   from a previous attempt, then new ones);
2. ``BEGIN IMMEDIATE``; per entry: validate, insert into ``events`` (a known event id is a
   no-op), apply the projections inside a savepoint; an entry that fails is set aside in
   ``rejected_events`` and the rest of the batch goes on;
3. ``COMMIT``;
4. acknowledge and delete the entries, and move ``memq:committed`` forward (one MULTI);
5. run the after-commit hooks (enqueue embedding jobs, register task runs).

A crash before 3 rolls back and the entries are delivered again; a crash between 3 and 4
redelivers entries whose events are already in the log, and re-applying them is a no-op; a
crash between 4 and 5 is repaired by the reconcile pass at start.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import apsw
import redis

from memq import names
from memq.broker import TRANSIENT
from memq.clock import now_rfc3339
from memq.config import Config
from memq.errors import InvalidEvent, StoreError
from memq.events import Event, decode
from memq.logs import log
from store import rejected, schema
from store.connection import open_connection
from store.effects import Effects
from store.lock import WriterLock
from store.log import append_event
from store.projections import apply_event

logger = logging.getLogger("memq.writer")

Entry = tuple[bytes, dict[bytes, bytes] | None]
AfterCommit = Callable[[Effects], None]
Reconciler = Callable[[], None]


@dataclass
class BatchResult:
    applied: int = 0
    duplicates: int = 0
    rejected: int = 0
    last_id: str = ""
    effects: Effects = field(default_factory=Effects)

    @property
    def size(self) -> int:
        return self.applied + self.duplicates + self.rejected


class Writer:
    """Owns the database. Build it with :meth:`open`; drive it with :meth:`run`."""

    def __init__(self, config: Config, conn: apsw.Connection, broker: redis.Redis) -> None:
        self.config = config
        self.conn = conn
        self.redis = broker
        self.after_commit: list[AfterCommit] = []
        self.reconcilers: list[Reconciler] = []
        self._lock: WriterLock | None = None

    @classmethod
    def open(cls, config: Config, broker: redis.Redis) -> Writer:
        """Take the writer lock, open and migrate the database, join the consumer group."""
        lock = WriterLock(config.db_path)
        lock.acquire()
        try:
            conn = open_connection(config.db_path)
            schema.migrate(conn)
        except BaseException:
            lock.release()
            raise
        writer = cls(config, conn, broker)
        writer._lock = lock
        return writer

    def close(self) -> None:
        self.conn.close()
        if self._lock is not None:
            self._lock.release()

    # -- the loop -------------------------------------------------------------------

    def run(self, stop: threading.Event) -> None:
        """Process batches until ``stop`` is set; the batch in hand always finishes."""
        self._ensure_group()
        self.reconcile()
        next_reconcile = time.monotonic() + self.config.writer.reconcile_interval_s
        backoff = _Backoff()
        while not stop.is_set():
            try:
                self.step()
                backoff.reset()
            except TRANSIENT as exc:
                log(logger, "redis unavailable, retrying", logging.WARNING, error=str(exc))
                backoff.wait(stop)
            except redis.exceptions.ResponseError as exc:
                self._on_response_error(exc, backoff, stop)
            except StoreError as exc:
                log(logger, "database write failed; entries stay unacknowledged",
                    logging.ERROR, error=str(exc))
                backoff.wait(stop)
            if time.monotonic() >= next_reconcile:
                self.reconcile()
                next_reconcile = time.monotonic() + self.config.writer.reconcile_interval_s

    def step(self) -> BatchResult:
        """Read one batch, apply it, acknowledge it; an empty read returns an empty result."""
        entries = self._read()
        if not entries:
            return BatchResult()
        started = time.perf_counter()
        result = self.apply_batch(entries)
        apply_ms = (time.perf_counter() - started) * 1000
        self._acknowledge(entries, result.last_id)
        for hook in self.after_commit:
            hook(result.effects)
        log(logger, "batch committed", size=result.size, applied=result.applied,
            duplicates=result.duplicates, rejected=result.rejected,
            apply_ms=round(apply_ms, 2), lag_ms=_lag_ms(entries[0][0]))
        return result

    def reconcile(self) -> None:
        """Repair what a crash between commit and follow-up may have left undone."""
        for reconciler in self.reconcilers:
            try:
                reconciler()
            except (StoreError, *TRANSIENT) as exc:
                log(logger, "reconcile failed", logging.WARNING, error=str(exc))

    # -- one batch --------------------------------------------------------------------

    def apply_batch(self, entries: list[Entry]) -> BatchResult:
        """Apply ``entries`` in one transaction; the public method owns it."""
        result = BatchResult(last_id=entries[-1][0].decode())
        now = now_rfc3339()
        cur = self.conn.cursor()
        try:
            cur.execute("BEGIN IMMEDIATE")
            for stream_id, fields in entries:
                self._apply_entry(cur, stream_id.decode(), fields or {}, now, result)
            cur.execute("COMMIT")
        except apsw.Error as exc:
            if not self.conn.get_autocommit():
                cur.execute("ROLLBACK")
            result.effects.clear()
            raise StoreError(f"batch of {len(entries)} not committed: {exc}") from exc
        except BaseException:
            if not self.conn.get_autocommit():
                cur.execute("ROLLBACK")
            raise
        return result

    def _apply_entry(
        self, cur: apsw.Cursor, stream_id: str, fields: dict[bytes, bytes], now: str,
        result: BatchResult,
    ) -> None:
        raw = fields.get(names.EVENT_FIELD, b"")
        replay_of = _replay_of(fields)
        try:
            if not raw:
                raise InvalidEvent(f"entry has no {names.EVENT_FIELD.decode()!r} field")
            event = decode(raw, self.config.limits)
            applied = self._apply_event(cur, event, now, result.effects)
        except InvalidEvent as exc:
            rejected.record(cur, stream_id, raw, str(exc), now, replay_of)
            result.rejected += 1
            log(logger, "event rejected", logging.WARNING, stream_id=stream_id, reason=str(exc))
            return
        if replay_of is not None:
            rejected.mark_replayed(cur, replay_of, now)
        if applied:
            result.applied += 1
        else:
            result.duplicates += 1

    def _apply_event(self, cur: apsw.Cursor, event: Event, now: str, effects: Effects) -> bool:
        """Insert and project one event inside a savepoint; False if it was a duplicate."""
        cur.execute("SAVEPOINT event")
        mark = (len(effects.embed), set(effects.tasks_changed), len(effects.consolidate))
        try:
            seq = append_event(cur, event, now)
            if seq is not None:
                apply_event(cur, event, seq, effects)
        except (InvalidEvent, apsw.ConstraintError, apsw.MismatchError) as exc:
            cur.execute("ROLLBACK TO event")
            cur.execute("RELEASE event")
            del effects.embed[mark[0]:]
            effects.tasks_changed.intersection_update(mark[1])
            del effects.consolidate[mark[2]:]
            raise InvalidEvent(str(exc)) from exc
        cur.execute("RELEASE event")
        return seq is not None

    # -- Redis ------------------------------------------------------------------------

    def _ensure_group(self) -> None:
        try:
            # From "0", not "$": entries sent before the first writer ever ran are kept.
            self.redis.xgroup_create(names.INBOX_STREAM, names.WRITER_GROUP, id="0",
                                     mkstream=True)
        except redis.exceptions.ResponseError as exc:
            if "BUSYGROUP" not in str(exc):
                raise

    def _read(self) -> list[Entry]:
        batch = self.config.writer.batch_size
        group, consumer = names.WRITER_GROUP, names.WRITER_CONSUMER
        # Entries delivered before but never acknowledged come first (a crash, a failed
        # commit); only when none are left do we ask for new ones, blocking briefly.
        reply: Any = self.redis.xreadgroup(group, consumer, {names.INBOX_STREAM: "0"}, batch)
        entries = reply[0][1] if reply else []
        if entries:
            return list(entries)
        reply = self.redis.xreadgroup(group, consumer, {names.INBOX_STREAM: ">"}, batch,
                                      block=self.config.writer.block_ms)
        return list(reply[0][1]) if reply else []

    def _acknowledge(self, entries: list[Entry], last_id: str) -> None:
        ids = [stream_id for stream_id, _ in entries]
        pipe = self.redis.pipeline(transaction=True)
        pipe.xack(names.INBOX_STREAM, names.WRITER_GROUP, *ids)
        pipe.xdel(names.INBOX_STREAM, *ids)
        pipe.set(names.COMMITTED_KEY, last_id)
        pipe.set(names.WRITER_HEARTBEAT_KEY, now_rfc3339(), ex=60)
        pipe.execute()

    def _on_response_error(
        self, exc: redis.exceptions.ResponseError, backoff: _Backoff, stop: threading.Event
    ) -> None:
        if "NOGROUP" in str(exc):
            # Redis came back without our stream (restarted without persistence).
            log(logger, "consumer group missing; recreating", logging.WARNING)
            self._ensure_group()
            return
        log(logger, "redis refused a command", logging.ERROR, error=str(exc))
        backoff.wait(stop)


def _replay_of(fields: dict[bytes, bytes]) -> int | None:
    value = fields.get(names.REPLAY_FIELD)
    try:
        return int(value) if value is not None else None
    except ValueError:
        return None


def _lag_ms(stream_id: bytes) -> int:
    sent_ms = int(stream_id.split(b"-", 1)[0])
    return max(0, int(time.time() * 1000) - sent_ms)


class _Backoff:
    """Exponential wait between retries, cut short when the writer is told to stop."""

    def __init__(self, first: float = 0.1, limit: float = 5.0) -> None:
        self.first, self.limit, self.delay = first, limit, first

    def wait(self, stop: threading.Event) -> None:
        stop.wait(self.delay)
        self.delay = min(self.limit, self.delay * 2)

    def reset(self) -> None:
        self.delay = self.first
