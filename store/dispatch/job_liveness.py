"""Whether an RQ job will still run, or is running in a worker that is alive.

A job is *in flight* when it waits (queued, scheduled or deferred) or one of its
executions runs in a live worker. RQ notices a dead SimpleWorker only when the job's entry
in the StartedJobRegistry expires (the job timeout plus a minute), so an execution is
judged here instead: its worker must still hold a Redis connection named after it
(``memq worker`` names every connection it opens; RQ alone names only the first) and must
have been born before the execution started, since a worker restarted under the same name
does not vouch for its predecessor's work.

The executions decide before the status does. A worker records its execution (and the
StartedJobRegistry entry) in one round trip and marks the job *started* in the next; a
worker killed between the two leaves a job that still reads *queued* although no queue
holds it any more. Only the executions of the current enqueueing count: a job deleted and
enqueued afresh under the same id starts with none.
"""

from __future__ import annotations

import datetime
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any

import orjson
import redis
from rq.executions import Execution, ExecutionRegistry
from rq.job import Job, JobStatus
from rq.utils import utcformat
from rq.worker import Worker

WAITING = frozenset(s.value for s in (JobStatus.QUEUED, JobStatus.SCHEDULED, JobStatus.DEFERRED))

_JOB_FIELDS = ("status", "meta", "enqueued_at")
_RUN_FIELDS = ("worker_name", "created_at")
_READ_CHUNK = 500


@dataclass(frozen=True)
class Liveness:
    """Which RQ workers are alive, read once per scan."""

    client_names: frozenset[str] | None
    """Names of connected clients; None where CLIENT LIST is refused (some hosted Redis)."""
    births: dict[str, str]
    """Worker name -> its birth time as RQ stores it; absent when its key has expired."""

    @classmethod
    def read(cls, connection: redis.Redis, workers: Iterable[str] = ()) -> Liveness:
        try:
            clients: frozenset[str] | None = frozenset(
                str(c.get("name", "")) for c in connection.client_list()
            )
        except redis.exceptions.ResponseError:
            clients = None
        pipe = connection.pipeline(transaction=False)
        wanted = sorted({w for w in workers if w})
        for name in wanted:
            pipe.hget(Worker.redis_worker_namespace_prefix + name, "birth")
        births = {n: b.decode() for n, b in zip(wanted, pipe.execute(), strict=True) if b}
        return cls(clients, births)

    def runs(self, worker_name: str, started_at: str) -> bool:
        """Is ``worker_name`` alive and the same process that started a job at ``started_at``?"""
        birth = self.births.get(worker_name)
        if birth is None or (self.client_names is not None
                             and worker_name not in self.client_names):
            return False
        # Both are RQ's fixed-width UTC format, so text order is time order.
        return birth <= started_at


@dataclass(frozen=True)
class Run:
    """One execution of a job: which worker took it, and when (RQ's UTC format)."""

    worker_name: str
    started_at: str


@dataclass(frozen=True)
class JobInfo:
    """The fields of a job needed to tell whether it is in flight."""

    id: str
    status: str
    meta: dict[str, Any]
    enqueued_at: str = ""
    runs: tuple[Run, ...] = ()

    def in_flight(self, liveness: Liveness) -> bool:
        current = [run for run in self.runs if run.started_at >= self.enqueued_at]
        if current:
            return any(liveness.runs(run.worker_name, run.started_at) for run in current)
        return self.status in WAITING

    @property
    def workers(self) -> list[str]:
        return [run.worker_name for run in self.runs]


def read_jobs(connection: redis.Redis, job_ids: Sequence[str]) -> list[JobInfo]:
    """The jobs that still exist among ``job_ids``, reading a few small fields of each."""
    jobs: list[JobInfo] = []
    for start in range(0, len(job_ids), _READ_CHUNK):
        jobs.extend(_read_chunk(connection, job_ids[start:start + _READ_CHUNK]))
    return jobs


def in_flight(connection: redis.Redis, job_id: str) -> bool:
    """Is this one job in flight (see the module docstring)?"""
    found = read_jobs(connection, [job_id])
    return bool(found) and found[0].in_flight(Liveness.read(connection, found[0].workers))


def live(connection: redis.Redis, jobs: list[JobInfo]) -> list[JobInfo]:
    """Those of ``jobs`` in flight, judged against one reading of the workers."""
    liveness = Liveness.read(connection, (w for job in jobs for w in job.workers))
    return [job for job in jobs if job.in_flight(liveness)]


def _read_chunk(connection: redis.Redis, job_ids: Sequence[str]) -> list[JobInfo]:
    pipe = connection.pipeline(transaction=False)
    for jid in job_ids:
        pipe.hmget(Job.key_for(jid), _JOB_FIELDS)
        pipe.zrange(ExecutionRegistry.key_template.format(jid), 0, -1)
    replies = pipe.execute()
    found = {jid: (fields, [e.decode() for e in executions])
             for jid, fields, executions in zip(job_ids, replies[::2], replies[1::2], strict=True)
             if fields[0]}  # no status: deleted or expired since it was listed
    runs = _read_runs(connection, {jid: ids for jid, (_, ids) in found.items() if ids})
    return [_job_info(jid, fields, runs.get(jid, ())) for jid, (fields, _) in found.items()]


def _read_runs(connection: redis.Redis, executions: dict[str, list[str]]
               ) -> dict[str, tuple[Run, ...]]:
    if not executions:
        return {}  # the usual case: nothing has started
    pipe = connection.pipeline(transaction=False)
    keys = [(jid, eid) for jid, ids in executions.items() for eid in ids]
    for jid, eid in keys:
        pipe.hmget(Execution(eid, jid, connection).key, _RUN_FIELDS)
    runs: dict[str, list[Run]] = {}
    for (jid, _), (worker, created) in zip(keys, pipe.execute(), strict=True):
        if worker and created:  # an execution whose record expired tells nothing
            runs.setdefault(jid, []).append(Run(worker.decode(), _rq_time(float(created))))
    return {jid: tuple(found) for jid, found in runs.items()}


def _rq_time(timestamp: float) -> str:
    return utcformat(datetime.datetime.fromtimestamp(timestamp, datetime.UTC))


def _job_info(jid: str, fields: list[bytes | None], runs: tuple[Run, ...]) -> JobInfo:
    status, meta_raw, enqueued = (v.decode() if v else "" for v in fields)
    return JobInfo(jid, status, _meta(meta_raw), enqueued, runs)


def _meta(raw: str) -> dict[str, Any]:
    try:
        meta = orjson.loads(raw) if raw else {}
    except orjson.JSONDecodeError:
        return {}  # a job not written by memq (pickled meta)
    return meta if isinstance(meta, dict) else {}
