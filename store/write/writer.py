"""The single writer: inbox entries in, one transaction per batch, acknowledged after commit.

Order of a batch, and why nothing is lost or duplicated:

1. read up to ``batch_size`` entries of each inbox stream through the consumer group (at
   start, first those a previous writer left pending), validate them and judge them with
   their stream's rights (:mod:`memq.authority`);
2. ``BEGIN IMMEDIATE``; insert the events (an event id already in the log is a no-op) and
   apply the projections; an entry that cannot be applied is set aside in
   ``rejected_events`` and the rest of the batch goes on;
3. ``COMMIT``;
4. acknowledge and delete the entries, report rejections to their senders, and move
   each stream's commit position (``memq:committed``, ``memq:committed:worker``,
   ``memq:committed:admin``) forward, in one MULTI;
5. run the after-commit hooks (register task runs, plan consolidation) and hand the
   Redis-only ones (enqueue embedding jobs) to the writer's background thread.

A crash before 3 rolls back and the entries are delivered again; a crash between 3 and 4
redelivers entries whose events are already in the log, and re-applying them is a no-op; a
crash between 4 and 5 is repaired by the reconcile pass at start. A batch that cannot be
committed (disk full, I/O error) stays in hand, unacknowledged, and is retried with backoff;
meanwhile the writer says why in its log and in ``memq:writer:stalled`` (``memq status``).
"""

from __future__ import annotations

import functools
import logging
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import TypeVar

import apsw
import redis

from memq import identity, metrics, names
from memq.broker import TRANSIENT
from memq.clock import now_rfc3339
from memq.config import Config
from memq.errors import StoreError, WriterFailed
from memq.events import Event
from memq.inbox import stream_position
from memq.logs import log, log_routine, redact_url
from memq.store import lexical, schema
from memq.store.effects import Effects
from memq.store.projections import erasure_steps, record_event
from memq.store.read.identity import database_id
from memq.store.write import batch, positions
from memq.store.write.background import Background
from memq.store.write.batch import BatchResult, Entry
from memq.store.write.checkpoints import Checkpoints
from memq.store.write.inbox import Inbox, Prefetcher
from memq.store.write.lock import WriterLock
from memq.store.write.relay import Relay, relay_all

logger = logging.getLogger("memq.writer")

AfterCommit = Callable[[Effects], None]
Reconciler = Callable[[], None]
T = TypeVar("T")

HEARTBEAT_INTERVAL_S = 10.0
"""How often an idle writer refreshes its heartbeat (it expires after 60 s)."""


class Stopped(Exception):
    """The writer was told to stop while waiting out a failure; the batch stays pending."""


class Writer:
    """Owns the database. Build it with :meth:`open`; drive it with :meth:`run`."""

    def __init__(self, config: Config, conn: apsw.Connection, broker: redis.Redis) -> None:
        self.config = config
        self.conn = conn
        self.redis = broker
        self.inbox = Inbox(broker, config)
        self.after_commit: list[AfterCommit] = []
        self.reconcilers: list[Reconciler] = []
        self.background = Background("memq-writer-followups")
        """Where hooks send follow-ups that need Redis only (see store/background.py)."""
        self._lock: WriterLock | None = None
        self.checkpoints: Checkpoints | None = None
        """Checkpoints the WAL beside the commits (set by :meth:`open`)."""
        self.claim = identity.Claim.of(database_id(conn) or "", config.db_path)
        """This database, as the writer claims the Redis keyspace for it (memq/identity.py)."""
        self.rebind = False
        """Take the keyspace over from another database (once: ``memq writer --rebind``)."""
        self.committed = threading.Event()
        """Set after each acknowledged batch, for the keys' relay."""
        self.erasing = erasure_steps.pending(conn)
        """A big forget is being erased in steps (store/projections/erasure_steps.py): one
        runs after each batch, and the loop does not wait for entries while any is left.
        Read from the database, so a writer that restarts goes on where one stopped."""
        self.untidy = True
        """The lexical index may have segments to merge (store/lexical.py's tidy): after
        each batch, and at start. Merged while no batch waits (:meth:`upkeep`)."""
        self._tidied_last = False

    @classmethod
    def open(cls, config: Config, broker: redis.Redis) -> Writer:
        """Take the writer lock, open and migrate the database."""
        lock = WriterLock(config.db_path)
        lock.acquire()
        try:
            conn, _ = schema.open_migrated(config.db_path)
        except BaseException:
            lock.release()
            raise
        writer = cls(config, conn, broker)
        writer._lock = lock
        try:
            writer.checkpoints = Checkpoints(conn)
        except BaseException:
            writer.close()
            raise
        return writer

    def close(self) -> None:
        self.background.close()
        if self.checkpoints is not None:
            self.checkpoints.close()
        self.conn.close()
        if self._lock is not None:
            self._lock.release()

    # -- the loop -------------------------------------------------------------------

    def run(self, stop: threading.Event) -> None:
        """Process batches until ``stop`` is set; the batch in hand always finishes."""
        try:
            self._retry(self.bind_database, stop)
            self._retry(self.inbox.ensure_group, stop)
            self._retry(self.inbox.load_committed, stop)
            self.catch_up(stop)
            self.reconcile()
            self._drain_pending(stop)
            self._retry(self.inbox.repair_ids, stop)
        except Stopped:
            return
        wait_s = self.config.writer.block_ms / 1000
        relays = [Relay(self.redis, stream, stop, wait_s, self.committed)
                  for stream in names.INBOX_QUEUES]
        prefetcher = Prefetcher(self.inbox, self.config, stop)
        for thread in (*relays, prefetcher):
            thread.start()
        next_reconcile = time.monotonic() + self.config.writer.reconcile_interval_s
        next_beat = 0.0
        try:
            while not stop.is_set():
                busy = self.erasing or self.untidy
                item = prefetcher.get(timeout=0.0 if busy else 0.2)
                if item is not None:
                    self.commit(*item, stop=stop)
                elif not busy:
                    self._check_alive(prefetcher, stop)
                self.upkeep(idle=item is None, stop=stop)
                if time.monotonic() >= next_beat:
                    self._retry(self._heartbeat, stop)
                    self._retry(self.inbox.trim, stop)
                    self._retry(self.inbox.repair_ids, stop)
                    next_beat = time.monotonic() + HEARTBEAT_INTERVAL_S
                if time.monotonic() >= next_reconcile:
                    self.reconcile()
                    next_reconcile = time.monotonic() + self.config.writer.reconcile_interval_s
        except Stopped:
            log(logger, "stopped while retrying; the batch stays unacknowledged")
        except BaseException:
            self.inbox.flatline()  # a dead writer must not look alive for another minute
            raise
        finally:
            stop.set()
            for thread in (*relays, prefetcher):
                thread.join()

    def bind_database(self) -> None:
        """Claim the Redis keyspace for this database; :class:`DatabaseMismatch` if it
        belongs to another one (see memq/identity.py)."""
        identity.bind(self.redis, self.claim, rebind=self.rebind,
                      url=redact_url(self.config.redis_url))
        self.rebind = False

    def _heartbeat(self) -> None:
        # Claimed again each time: a Redis that restarted empty belongs to no one, and a
        # writer of another database must not take it meanwhile.
        self.bind_database()
        self.inbox.heartbeat()

    def _check_alive(self, prefetcher: Prefetcher, stop: threading.Event) -> None:
        """Stop the writer, heartbeat and all, if a thread it relies on has died."""
        if stop.is_set():
            return
        if not self.background.is_alive():
            raise WriterFailed("the writer stopped: its follow-up thread died")
        if prefetcher.is_alive():
            return
        failure = prefetcher.failure
        cause = "it ended" if failure is None else f"{type(failure).__name__}: {failure}"
        raise WriterFailed(f"the writer stopped: its inbox reader died ({cause})") from failure

    def catch_up(self, stop: threading.Event | None = None) -> int:
        """Apply again what the inbox holds beyond the position this database records
        (store/write/positions.py); how many entries were read.

        After a restore from a replica that lagged, the entries it never received were
        acknowledged by the lost writer, and only the inbox's retention keeps them; what the
        replica did receive comes back as duplicates, skipped by event id. On an ordinary
        start there is nothing beyond the recorded position but unacknowledged entries.
        """
        after = positions.recorded(self.conn)
        upto = self._retry(self.inbox.delivered, stop)
        after = {s: after.get(s, (0, 0)) for s, mark in upto.items() if after.get(s, (0, 0)) < mark}
        if not after:
            return 0
        self._warn_if_trimmed(after)
        count = 0
        while after:
            entries = self._retry(functools.partial(self.inbox.read_range, after, upto), stop)
            if not entries:
                break
            self.commit(entries, batch.decode_entries(entries, self.config.limits), stop=stop)
            count += len(entries)
            for entry in entries:
                after[entry.stream] = stream_position(entry.id)
            after = {s: p for s, p in after.items() if p < upto[s]}
        log(logger, "caught up with the inbox beyond the database's recorded position",
            entries=count)
        return count

    def _warn_if_trimmed(self, after: dict[str, tuple[int, int]]) -> None:
        """Say so when entries this database never applied are gone from the inbox."""
        committed = self.inbox.committed()
        for stream, position in after.items():
            oldest = self._retry(functools.partial(self.inbox.oldest, stream), None)
            behind = position < committed.get(stream, (0, 0))
            # The entry at the position itself is gone: anything after it may be gone too.
            if behind and (oldest is None or oldest > position):
                log(logger, "this database is older than what the inbox still holds: "
                    "committed entries between its position and the oldest kept one may be "
                    "lost (keep_inbox_s shorter than the replica's lag?)", logging.ERROR,
                    stream=stream, position=f"{position[0]}-{position[1]}",
                    oldest=None if oldest is None else f"{oldest[0]}-{oldest[1]}")

    def _drain_pending(self, stop: threading.Event) -> None:
        while not stop.is_set():
            entries = self._retry(self._read_pending, stop)
            if not entries:
                return
            self.commit(entries, batch.decode_entries(entries, self.config.limits), stop=stop)

    def _read_pending(self) -> list[Entry]:
        """What was delivered and never acknowledged. A Redis emptied since the group was
        made (FLUSHALL, a restart without persistence) answers NOGROUP: retrying the read
        would never succeed, so claim the keyspace again and re-create the group (from
        "0": what arrives meanwhile is kept) and read again."""
        try:
            return self.inbox.read_pending()
        except redis.exceptions.ResponseError as exc:
            if "NOGROUP" not in str(exc):
                raise
        log(logger, "consumer group missing at start; claiming and recreating",
            logging.WARNING)
        self.bind_database()
        self.inbox.ensure_group()
        return self.inbox.read_pending()

    def step(self) -> BatchResult:
        """Read one batch (pending first), commit it and let its follow-ups finish; for tests
        and tools, not the loop."""
        relay_all(self.redis)
        entries = self.inbox.read_pending() or self.inbox.read_new()
        if not entries:
            return BatchResult()
        result = self.commit(entries, batch.decode_entries(entries, self.config.limits))
        while self.erasing:
            self.erasing = self.erase_step()
        self.background.wait()
        return result

    def commit(
        self, entries: list[Entry], decoded: list[batch.Decoded],
        stop: threading.Event | None = None,
    ) -> BatchResult:
        """Apply, acknowledge and follow up one batch, retrying until done or stopped."""
        started = time.perf_counter()
        result = self._retry(lambda: self.apply_batch(decoded, entries[-1].id.decode()), stop)
        apply_s = time.perf_counter() - started
        lag_ms = _lag_ms(entries[0].id)
        figures = metrics.BatchFigures(result.applied, result.duplicates, result.rejected,
                                       apply_s, lag_ms / 1000, time.time(), result.types)
        if self._retry(lambda: self.inbox.acknowledge(entries, figures, result.reports), stop):
            self._retry(self.inbox.repair_ids, stop)
        self.committed.set()  # the keys' relay may move more (store/write/relay.py)
        for hook in self.after_commit:
            self._retry(functools.partial(_follow_up, hook, result.effects), stop)
        self.erasing = self.erasing or result.effects.erasing
        self.untidy = True
        log_routine(logger, "batch committed", size=result.size, applied=result.applied,
            duplicates=result.duplicates, rejected=result.rejected,
            apply_ms=round(apply_s * 1000, 2), lag_ms=lag_ms)
        return result

    def reconcile(self) -> None:
        """Repair what a crash between commit and follow-up may have left undone."""
        try:
            stale = self.inbox.claim_stale(int(self.config.writer.stale_after_s * 1000))
            if stale:
                self.commit(stale, batch.decode_entries(stale, self.config.limits))
        except (StoreError, *TRANSIENT, redis.exceptions.ResponseError) as exc:
            log(logger, "reclaiming stale entries failed", logging.WARNING, error=str(exc))
        for reconciler in self.reconcilers:
            try:
                reconciler()
            except (StoreError, *TRANSIENT) as exc:
                log(logger, "reconcile failed", logging.WARNING, error=str(exc))
            except Exception:  # a bug here must not stop the writer at every start
                logger.exception("reconcile failed")

    def apply_local(self, events: list[Event]) -> Effects:
        """Apply events the writer makes itself (e.g. from the config file) in one transaction.

        They go straight into the log, not through the inbox: the writer already owns the
        database, and reading the state and writing its events in one transaction makes a
        repeated start a no-op. Unlike an inbox entry, an event that cannot be applied
        raises and nothing is committed. The caller runs any follow-up (the start-up
        reconcile does).
        """
        effects = Effects()
        now = now_rfc3339()
        cur = self.conn.cursor()
        cur.execute("BEGIN IMMEDIATE")
        try:
            for event in events:
                record_event(cur, event, now, effects)
        except BaseException:
            cur.execute("ROLLBACK")
            raise
        cur.execute("COMMIT")
        return effects

    def erase_step(self, stop: threading.Event | None = None) -> bool:
        """One bounded step of a big forget, in a transaction of its own, then its
        follow-up (after the last step: the WAL, the jobs, the outcome), retried like a
        batch's: a step committed must not lose it; whether any step is left. Between two
        steps, the next batch commits: no agent waits for the whole."""
        effects = Effects()
        more = self._retry(lambda: self._erase_step_in_transaction(effects), stop)
        for hook in self.after_commit:
            self._retry(functools.partial(_follow_up, hook, effects), stop)
        return more

    def upkeep(self, *, idle: bool, stop: threading.Event | None = None) -> None:
        """Between batches, one step of what is pending: merging the lexical index (only
        while no batch waits) or erasing a forget; both pending, each in turn, so a long
        merge of a large index delays a forget's end by no more than its own length."""
        tidy = idle and self.untidy and not (self.erasing and self._tidied_last)
        if tidy:
            self.untidy = self.tidy_step()
        elif self.erasing:
            self.erasing = self.erase_step(stop)
        self._tidied_last = tidy

    def tidy_step(self) -> bool:
        """One bounded step of merging the lexical index, in a transaction of its own;
        whether there may be more. Never waited out as a batch is: a merge that cannot
        commit (a disk too full for its new pages) is left until the next batch, which
        may still fit where it does not."""
        try:
            with self._transaction("a step of merging the lexical index") as cur:
                return lexical.tidy(cur)
        except StoreError as exc:
            log(logger, "merging the lexical index failed; left for later", logging.WARNING,
                error=str(exc))
            return False

    def _erase_step_in_transaction(self, effects: Effects) -> bool:
        effects.clear()  # a try rolled back leaves nothing to follow up
        with self._transaction("a step of erasing a forget") as cur:
            return erasure_steps.step(cur, effects)

    # -- one batch --------------------------------------------------------------------

    def apply_batch(self, decoded: list[batch.Decoded], last_id: str) -> BatchResult:
        """Apply a decoded batch in one transaction; the public method owns it."""
        try:
            return self._in_transaction(batch.apply_fast, decoded, last_id)
        except batch.RetryCarefully:
            return self._in_transaction(batch.apply_careful, decoded, last_id)

    def _in_transaction(
        self, apply: Callable[..., None], decoded: list[batch.Decoded], last_id: str
    ) -> BatchResult:
        result = BatchResult(last_id=last_id)
        with self._transaction(f"batch of {len(decoded)}") as cur:
            apply(cur, decoded, now_rfc3339(), result)
            positions.record(cur, ((item.stream, item.stream_id) for item in decoded))
        return result

    @contextmanager
    def _transaction(self, what: str) -> Iterator[apsw.Cursor]:
        """BEGIN IMMEDIATE, and COMMIT if the block ends well; else ROLLBACK, and a
        database error raised as :class:`StoreError` naming ``what`` was not committed."""
        cur = self.conn.cursor()
        try:
            cur.execute("BEGIN IMMEDIATE")
            yield cur
            cur.execute("COMMIT")
        except apsw.Error as exc:
            self._rollback(cur)
            raise StoreError(f"{what} not committed: {exc}") from exc
        except BaseException:
            self._rollback(cur)
            raise

    def _rollback(self, cur: apsw.Cursor) -> None:
        if not self.conn.get_autocommit():
            cur.execute("ROLLBACK")

    def _retry(self, action: Callable[[], T], stop: threading.Event | None) -> T:
        """Run ``action`` until it succeeds; Redis and disk failures are waited out.

        Without a ``stop`` event (tests, tools) the first failure is raised.
        """
        delay = 0.1
        while True:
            try:
                return action()
            except (*TRANSIENT, redis.exceptions.ResponseError, StoreError) as exc:
                if stop is None:
                    raise
                if stop.is_set():
                    raise Stopped from exc
                self._report_failure(exc, delay)
                stop.wait(delay)
                delay = min(5.0, delay * 2)

    def _report_failure(self, exc: Exception, delay: float) -> None:
        if isinstance(exc, StoreError):
            # Nothing is acknowledged until this clears: say so where operators look.
            cause = _store_cause(exc)
            log(logger, "cannot commit; nothing is acknowledged until this clears",
                logging.ERROR, cause=cause, error=str(exc), retry_in_s=delay)
            self.inbox.report_stall(f"cannot commit: {cause}")
            return
        log(logger, "retrying after failure", logging.WARNING, error=str(exc), retry_in_s=delay)


def _follow_up(hook: AfterCommit, effects: Effects) -> None:
    """Run one after-commit hook. Redis and disk failures are retried by the caller; a bug
    is logged and the writer goes on: the batch is committed and acknowledged, and the
    reconcile pass repairs a follow-up that was not done (a crash would not redo it either)."""
    try:
        hook(effects)
    except (*TRANSIENT, redis.exceptions.ResponseError, StoreError):
        raise
    except Exception:
        logger.exception("an after-commit follow-up failed; the reconcile pass repairs it")


def _store_cause(exc: StoreError) -> str:
    """The database's own reason in plain words (a full disk is the usual one)."""
    cause = exc.__cause__
    if isinstance(cause, apsw.FullError):
        return "the disk or the database is full"
    return str(cause or exc)


def _lag_ms(stream_id: bytes) -> int:
    sent_ms = int(stream_id.split(b"-", 1)[0])
    return max(0, int(time.time() * 1000) - sent_ms)
