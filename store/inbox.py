"""The writer's side of ``memq:inbox``: the consumer group, reading, acknowledging.

A :class:`Prefetcher` reads and validates the next batch in a thread while the writer
commits the current one: validation is Python work and a commit is mostly SQLite and
fsync, which run without the GIL, so on two cores the two overlap.
"""

from __future__ import annotations

import logging
import queue
import threading
from typing import Any

import redis

from memq import metrics, names
from memq.broker import TRANSIENT
from memq.clock import now_rfc3339
from memq.config import Config
from memq.logs import log
from store import batch
from store.batch import Entry

logger = logging.getLogger("memq.writer")


class Inbox:
    def __init__(self, broker: redis.Redis, config: Config) -> None:
        self.redis = broker
        self.batch_size = config.writer.batch_size
        self.block_ms = config.writer.block_ms

    def ensure_group(self) -> None:
        try:
            # From "0", not "$": entries sent before the first writer ever ran are kept.
            self.redis.xgroup_create(names.INBOX_STREAM, names.WRITER_GROUP, id="0",
                                     mkstream=True)
        except redis.exceptions.ResponseError as exc:
            if "BUSYGROUP" not in str(exc):
                raise

    def read_pending(self, after: str = "0") -> list[Entry]:
        """Entries delivered to the writer but never acknowledged, with ids after ``after``."""
        return self._read(after, block_ms=None)

    def claim_stale(self, min_idle_ms: int = 60_000) -> list[Entry]:
        """Entries pending for longer than ``min_idle_ms``: delivered but never committed.

        A batch in hand is committed within milliseconds, so an entry idle this long was
        lost between delivery and commit (for example Redis restarted from an append-only
        file that did not yet hold its acknowledgement). Claiming is idempotent.
        """
        reply: Any = self.redis.xautoclaim(
            names.INBOX_STREAM, names.WRITER_GROUP, names.WRITER_CONSUMER, min_idle_ms,
            start_id="0-0", count=self.batch_size,
        )
        return [entry for entry in reply[1] if entry and entry[1] is not None]

    def read_new(self) -> list[Entry]:
        return self._read(">", block_ms=self.block_ms)

    def _read(self, start: str, block_ms: int | None) -> list[Entry]:
        reply: Any = self.redis.xreadgroup(
            names.WRITER_GROUP, names.WRITER_CONSUMER, {names.INBOX_STREAM: start},
            self.batch_size, block=block_ms,
        )
        if not reply:
            return []
        return list(reply[0][1])

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

    def acknowledge(
        self, entries: list[Entry], last_id: str, figures: metrics.BatchFigures | None = None
    ) -> None:
        """Ack and delete the entries, move the commit position, record the figures:
        atomically, so the numbers only move for committed batches."""
        ids = [stream_id for stream_id, _ in entries]
        pipe = self.redis.pipeline(transaction=True)
        pipe.xack(names.INBOX_STREAM, names.WRITER_GROUP, *ids)
        pipe.xdel(names.INBOX_STREAM, *ids)
        pipe.set(names.COMMITTED_KEY, last_id)
        pipe.set(names.WRITER_HEARTBEAT_KEY, now_rfc3339(), ex=60)
        pipe.delete(names.WRITER_STALLED_KEY)
        if figures is not None:
            metrics.record_batch(pipe, figures)
        pipe.execute()


Prefetched = tuple[list[Entry], list[batch.Decoded]]


class Prefetcher(threading.Thread):
    """Reads and decodes new entries ahead of the writer, at most :data:`AHEAD` batches."""

    AHEAD = 3

    def __init__(self, inbox: Inbox, config: Config, stop: threading.Event) -> None:
        super().__init__(name="memq-inbox-prefetch", daemon=True)
        self.inbox = inbox
        self.limits = config.limits
        self.stop = stop
        self.ready: queue.Queue[Prefetched] = queue.Queue(maxsize=self.AHEAD)

    def run(self) -> None:
        delay = 0.1
        # After a broken connection, Redis may have delivered entries whose reply never
        # arrived (they sit pending under our name); read those again before new ones, or
        # they would wait for the stale-entry pass while later entries commit past them.
        pending_after: str | None = None
        while not self.stop.is_set():
            try:
                if pending_after is None:
                    entries = self.inbox.read_new()
                else:
                    entries = self.inbox.read_pending(after=pending_after)
                    pending_after = entries[-1][0].decode() if entries else None
                delay = 0.1
            except (*TRANSIENT, redis.exceptions.ResponseError) as exc:
                self._on_error(exc)
                self.stop.wait(delay)
                delay = min(5.0, delay * 2)
                pending_after = "0"
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
        for _ in range(self.AHEAD - 1):
            try:
                more_entries, more_decoded = self.ready.get_nowait()
            except queue.Empty:
                break
            entries, decoded = entries + more_entries, decoded + more_decoded
        return entries, decoded
