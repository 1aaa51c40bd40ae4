"""After a forget is committed: the WAL truncated, the RQ jobs that carry the text deleted.

The transaction (``store/projections/forgetting.py``) cannot reach two places:

- the WAL, which still holds pages as they were (the forgotten text among them) until a
  checkpoint copies the new ones into the database file and the log is truncated.
  TRUNCATE waits, up to the busy timeout, for readers to leave older snapshots; one that
  could not is tried again after the next batch and on every reconcile pass;
- RQ jobs in Redis carry the text of the messages they embed or summarise: queued,
  running, finished (kept for their result's time) or failed (kept for a week). Each memq
  job names its messages in its meta, so the jobs of forgotten messages are found and
  deleted, with their results and RQ's bookkeeping (queue, registries, executions), in a
  few round trips and without loading the texts. A job still running when its messages
  were forgotten is saved again by its worker when it ends: the reconcile pass deletes it
  then (its result arrives as an event, which the writer tombstones on arrival).

Redis's own persistence keeps what it was sent: with an append-only file (what ``memq up``
runs), every inbox entry and job is in it until the file is rewritten. So once the jobs
are deleted, a rewrite must run that *starts after* the deletes and ends: one already
running copies what Redis held before them, and Redis refuses a second meanwhile. The
:class:`AofRewrites` thread waits for the running one, asks for a new one, waits for it to
end, and only then publishes the outcome at ``memq:erased:<event id>``, with
``aof_rewritten`` saying whether it did (a Redis without the file, or that refuses the
command, is left as it is). Forgets that arrive while it waits share the next rewrite.
"""

from __future__ import annotations

import contextlib
import logging
import threading
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any

import apsw
import orjson
import redis
from rq import Queue
from rq.exceptions import NoSuchJobError
from rq.executions import Execution, ExecutionRegistry
from rq.intermediate_queue import IntermediateQueue
from rq.job import Job
from rq.results import Result

from memq import jobs, names
from memq.logs import log
from memq.store.connection import BUSY_TIMEOUT_MS
from memq.store.effects import Effects, Erasure

logger = logging.getLogger("memq.writer")

OUTCOME_TTL_S = 24 * 3600
"""How long the outcome of a forget stays readable."""

JOB_PATTERNS = ("rq:job:memq-embed-*", "rq:job:memq-consolidate-*")
"""The jobs that carry message text (their ids: store/dispatch/*_jobs.py)."""

Erased = Callable[[list[str]], bool]
"""message ids -> whether any of them was forgotten."""


class ErasureFollowUp:
    """The writer's after-commit hook and reconciler for forgets."""

    def __init__(self, conn: apsw.Connection, connection: redis.Redis, *,
                 replicated: bool = False) -> None:
        self.conn = conn
        self.redis = connection
        self.replicated = replicated
        """Litestream replicates the database: its read transaction keeps every TRUNCATE
        from finishing (memq/replication.py), so the WAL is left to its checkpoints."""
        self.waiting: list[dict[str, Any]] = []
        """Outcomes held back until the WAL could be truncated."""
        self.rewrites = AofRewrites(connection)
        """Publishes them once Redis's append-only file no longer holds their text."""

    def after_commit(self, effects: Effects) -> None:
        if not effects.erased and not self.waiting:
            return
        ids = {mid for erasure in effects.erased for mid in erasure.message_ids}
        deleted = sweep_jobs(self.redis, lambda found: not ids.isdisjoint(found)) if ids else 0
        self.waiting += [self._outcome(erasure, deleted) for erasure in effects.erased]
        self._finish()

    def reconcile(self) -> None:
        """Truncate a WAL still owed; delete jobs saved again since their messages went."""
        sweep_jobs(self.redis, self._erased)
        self._finish()

    def _finish(self) -> None:
        if not self.waiting:
            return
        # With a replica, one try without waiting: Litestream's reader would make every
        # attempt wait out the busy timeout and fail, batch after batch.
        truncated = truncate_wal(self.conn, wait=not self.replicated)
        if not truncated and not self.replicated:
            log(logger, "the WAL could not be truncated yet (a reader holds an old snapshot, "
                "or the writer's checkpoint thread is running); trying again after the next "
                "batch", logging.WARNING)
            return
        if not truncated:
            log(logger, "the WAL is left to Litestream's checkpoint; the forgotten text stays "
                "in the replica until Litestream's retention drops it", logging.WARNING)
        for outcome in self.waiting:
            outcome["wal_truncated"] = truncated
        self.rewrites.submit(self.waiting)
        self.waiting = []

    def _outcome(self, erasure: Erasure, jobs_deleted: int) -> dict[str, Any]:
        row = self.conn.execute(
            "SELECT kind, messages, events FROM erasures WHERE seq = ?", (erasure.seq,)
        ).fetchone()
        # No row: a retention pass (store/projections/retention.py), which erases records
        kind, messages, events = row if row is not None else ("retention", 0, 0)
        return {"event_id": erasure.event_id, "kind": kind, "messages": messages,
                "events": events, "jobs": jobs_deleted}

    def _erased(self, message_ids: list[str]) -> bool:
        row = self.conn.execute(
            """SELECT 1 FROM erased_messages
               WHERE message_id IN (SELECT value FROM json_each(?)) LIMIT 1""",
            (orjson.dumps(message_ids).decode(),)).fetchone()
        return row is not None


def truncate_wal(conn: apsw.Connection, *, wait: bool = True) -> bool:
    """Checkpoint everything and truncate the WAL; False if readers kept it busy (after
    the busy timeout, or at once unless ``wait``), or if another checkpoint was running
    (at once: SQLite does not wait for that one)."""
    if not wait:
        conn.set_busy_timeout(0)
    try:
        conn.wal_checkpoint(mode=apsw.SQLITE_CHECKPOINT_TRUNCATE)
    except apsw.BusyError:
        return False
    finally:
        if not wait:
            conn.set_busy_timeout(BUSY_TIMEOUT_MS)
    return True


REWRITE_WAIT_S = 600.0
"""The longest a forget's outcome waits for Redis's rewrites (a large file takes a while)."""

POLL_S = 0.02


class AofRewrites:
    """Publishes forgets' outcomes once a rewrite of the append-only file that started
    after their deletes has ended (see the module): one thread, forgets in order, started
    when there is something to wait for and gone once there is not."""

    def __init__(self, connection: redis.Redis) -> None:
        self.redis = connection
        self._pending: list[dict[str, Any]] = []
        self._lock = threading.Lock()
        self._thread: threading.Thread | None = None

    def submit(self, outcomes: list[dict[str, Any]]) -> None:
        with self._lock:
            self._pending += outcomes
            if self._thread is None:
                self._thread = threading.Thread(target=self._run, name="memq-aof-rewrites",
                                                daemon=True)
                self._thread.start()

    def _run(self) -> None:
        while True:
            with self._lock:  # all those waiting share the next rewrite
                outcomes, self._pending = self._pending, []
                if not outcomes:
                    self._thread = None
                    return
            try:
                rewritten = rewrite_append_only_file(self.redis)
            except redis.exceptions.RedisError as exc:
                log(logger, "the append-only file was not rewritten", logging.WARNING,
                    error=str(exc))
                rewritten = False
            self._publish(outcomes, rewritten)

    def _publish(self, outcomes: list[dict[str, Any]], rewritten: bool) -> None:
        for outcome in outcomes:
            outcome["aof_rewritten"] = rewritten
            try:
                self.redis.set(names.ERASED_PREFIX + outcome["event_id"],
                               orjson.dumps(outcome), ex=OUTCOME_TTL_S)
            except redis.exceptions.RedisError as exc:
                log(logger, "a forget's outcome could not be published", logging.WARNING,
                    error=str(exc), event_id=outcome["event_id"])
                continue
            log(logger, "forget done", **outcome)


def rewrite_append_only_file(connection: redis.Redis, wait_s: float = REWRITE_WAIT_S) -> bool:
    """Have Redis rewrite its append-only file from what it holds now, and wait until that
    rewrite has ended: True once it has, False if Redis keeps no such file, refuses, or
    takes longer than ``wait_s``."""
    if connection.config_get("appendonly").get("appendonly") != "yes":
        return False
    deadline = time.monotonic() + wait_s
    while True:
        if not _rewriting(connection):
            try:
                connection.bgrewriteaof()  # scheduled, if a snapshot is being saved
                break
            except redis.exceptions.ResponseError as exc:
                if "already in progress" not in str(exc):  # refused (ACL): say so
                    log(logger, "the append-only file was not rewritten", logging.WARNING,
                        error=str(exc))
                    return False
        if time.monotonic() > deadline:
            return False
        time.sleep(POLL_S)
    while _rewriting(connection):
        if time.monotonic() > deadline:
            return False
        time.sleep(POLL_S)
    return str(connection.info("persistence").get("aof_last_bgrewrite_status")) == "ok"


def _rewriting(connection: redis.Redis) -> bool:
    """A rewrite running or scheduled: one that may copy what Redis held before now."""
    state = connection.info("persistence")
    return bool(int(state["aof_rewrite_in_progress"]) or int(state["aof_rewrite_scheduled"]))


def sweep_jobs(connection: redis.Redis, erased: Erased) -> int:
    """Delete every memq job (and its result) that names a forgotten message; how many."""
    keys = [key for pattern in JOB_PATTERNS
            for key in connection.scan_iter(match=pattern, count=1000)]
    job_ids = [key.decode()[len(Job.redis_job_namespace_prefix):] for key in keys]
    job_ids = [jid for jid in job_ids if ":" not in jid]  # not rq:job:<id>:dependents
    doomed = [jid for jid, meta in zip(job_ids, _metas(connection, job_ids), strict=True)
              if erased(_message_ids(meta))]
    for start in range(0, len(doomed), _DELETE_ROUND):
        _delete_many(connection, doomed[start:start + _DELETE_ROUND])
    return len(doomed)


_DELETE_ROUND = 500
"""Jobs read and deleted per pipeline (a forget of 10,000 messages has ~160)."""

_FIELDS = ("origin", "group_id", "rate_limit_key")
"""What deleting a job needs to know of it: never its data, which holds the texts."""


@dataclass(frozen=True)
class _Doomed:
    job: Job
    """An empty Job of this id and origin: RQ's key names, nothing read or restored."""
    executions: tuple[str, ...]
    """Its execution ids: a worker has taken it, and may still be running it."""


def _delete_many(connection: redis.Redis, job_ids: list[str]) -> None:
    """Delete jobs as RQ's ``Job.delete`` does, in two round trips (a third when a worker
    has taken some) and without loading their data: RQ's loads each job, then reads its
    status and its executions one job at a time."""
    doomed, odd = _read(connection, job_ids)
    workers = _worker_names(connection, doomed)
    pipe = connection.pipeline(transaction=False)
    for origin in {d.job.origin for d in doomed}:
        _unlist(pipe, jobs.queue(origin, connection),
                [d.job.id for d in doomed if d.job.origin == origin])
    for each in doomed:
        _drop(pipe, each, workers)
    pipe.execute()
    for jid in odd:
        _delete(connection, jid)


def _read(connection: redis.Redis, job_ids: list[str]) -> tuple[list[_Doomed], list[str]]:
    """The jobs deleted together, and those left to RQ one by one: a hash without an origin
    (half-written, or gone since the scan), or a job in a group or under a rate limit,
    whose bookkeeping only RQ's own ``delete`` knows."""
    pipe = connection.pipeline(transaction=False)
    for jid in job_ids:
        pipe.hmget(Job.key_for(jid), _FIELDS)
        pipe.zrange(ExecutionRegistry(jid, connection).key, 0, -1)
    replies = pipe.execute()
    doomed: list[_Doomed] = []
    odd: list[str] = []
    for jid, (origin, group, limited), runs in zip(job_ids, replies[::2], replies[1::2],
                                                  strict=True):
        job = Job(jid, connection)
        job.origin = _text(origin)
        if not job.origin or group or limited:
            odd.append(jid)
        else:
            doomed.append(_Doomed(job, tuple(_text(r) for r in runs)))
    return doomed, odd


def _text(raw: bytes | None) -> str:
    try:
        return raw.decode() if raw else ""
    except UnicodeDecodeError:  # not a name RQ wrote
        return ""


def _worker_names(connection: redis.Redis, doomed: list[_Doomed]) -> dict[str, str]:
    """Execution id -> the worker that runs it, whose index of executions names it."""
    runs = [Execution(eid, d.job.id, connection) for d in doomed for eid in d.executions]
    if not runs:
        return {}  # the usual case: no worker has taken any of them
    pipe = connection.pipeline(transaction=False)
    for run in runs:
        pipe.hget(run.key, "worker_name")
    return {run.id: _text(name) for run, name in zip(runs, pipe.execute(), strict=True)}


def _unlist(pipe: Any, queue: Queue, job_ids: list[str]) -> None:
    """Out of every registry of their queue: RQ removes a job only from the registry of the
    status it reads, so one listed elsewhere (a status changed meanwhile) would stay."""
    registries = (queue.finished_job_registry, queue.failed_job_registry,
                  queue.deferred_job_registry, queue.ready_job_registry,
                  queue.scheduled_job_registry, queue.canceled_job_registry)
    for registry in registries:
        pipe.zrem(registry.key, *job_ids)
    # Also out of the list a worker moves a job to as it takes it (RQ's delete leaves it
    # there until that worker's next maintenance pass), with the mark RQ sets on it.
    taken = IntermediateQueue(queue.key, queue.connection)
    for jid in job_ids:
        queue.remove(jid, pipeline=pipe)
        pipe.lrem(taken.key, 1, jid)
    pipe.delete(*(taken.get_first_seen_key(jid) for jid in job_ids))


def _drop(pipe: Any, doomed: _Doomed, workers: dict[str, str]) -> None:
    """The job's own keys, and its executions as RQ's ``ExecutionRegistry.delete`` drops
    them (with their entries in the started registry and in their worker's index)."""
    job = doomed.job
    for eid in doomed.executions:
        run = Execution(eid, job.id, job.connection, workers.get(eid, ""))
        run.delete(job, pipe)
    pipe.delete(job.key, job.dependents_key, job.dependencies_key, job.execution_registry.key,
                Result.get_key(job.id))  # type: ignore[no-untyped-call]  # rq leaves it untyped


def _metas(connection: redis.Redis, job_ids: Iterable[str]) -> list[Any]:
    pipe = connection.pipeline(transaction=False)
    for jid in job_ids:
        pipe.hget(Job.key_for(jid), "meta")
    return list(pipe.execute())


def _message_ids(raw: bytes | None) -> list[str]:
    try:
        meta = orjson.loads(raw) if raw else {}
    except orjson.JSONDecodeError:
        return []
    ids = meta.get("message_ids") if isinstance(meta, dict) else None
    return [str(i) for i in ids] if isinstance(ids, list) else []


def _delete(connection: redis.Redis, job_id: str) -> None:
    with contextlib.suppress(NoSuchJobError, ValueError):  # half a job, or bad data
        jobs.fetch(job_id, connection).delete()
    # Whatever RQ could not reach: the hash itself, and its results stream.
    results = Result.get_key(job_id)  # type: ignore[no-untyped-call]  # rq leaves it untyped
    connection.delete(Job.key_for(job_id), results)


def outcome(connection: redis.Redis, event_id: str) -> dict[str, Any] | None:
    """What the forget ``event_id`` erased, once the writer has finished it; else None."""
    raw = connection.get(names.ERASED_PREFIX + event_id)
    return None if raw is None else dict(orjson.loads(raw))
