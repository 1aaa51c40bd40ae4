"""Embed jobs in RQ: deterministic ids, enqueueing, and which messages have a job in flight.

The writer (after each commit, and when it reconciles) and ``memq backfill-embeddings``
enqueue through here. The job function lives in ``workers/embed.py`` and is named by its
dotted path: the store does not import the workers. A job carries its messages' text; its
meta repeats their ids and the model, so finding what is in flight reads only that small
field of each job, never the texts.

*In flight* means waiting in the queue (or scheduled, or deferred), or started by a worker
that is still alive. RQ notices a dead SimpleWorker only when the job's entry in the
StartedJobRegistry expires (the job timeout plus a minute; see
``StartedJobRegistry.cleanup``), so a started job is judged here instead: its worker must
still hold a Redis connection named after it (``memq worker`` names every connection it
opens; RQ alone names only the first) and must have been born before the job started,
since a worker restarted under the same name does not vouch for its predecessor's job. A
job in the failed registry is not in flight.

An id is never queued twice. In rq 3.0 a plain enqueue with an id that exists overwrites
the job and pushes the id a second time, so the job would run twice. Ids are therefore
checked inside a transaction that WATCHes their job keys: the new ones are enqueued
together in one round trip, and an id that exists (or that another enqueuer took
meanwhile) goes through RQ's *unique* enqueue, which refuses with ``DuplicateJobError``.
A refused id whose job is no longer in flight (failed, abandoned by a dead worker, or
finished with results that never arrived) is deleted and enqueued afresh; one still in
flight is left alone.
"""

from __future__ import annotations

import contextlib
import hashlib
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass
from typing import Any

import orjson
import redis
from rq import Queue
from rq.exceptions import DuplicateJobError, NoSuchJobError
from rq.job import Job, JobStatus
from rq.registry import DeferredJobRegistry, ScheduledJobRegistry, StartedJobRegistry
from rq.serializers import JSONSerializer
from rq.worker import Worker

from memq import names

EMBED_FUNCTION = "workers.embed.embed_messages"
"""Dotted path of the job function; ``workers/queues.py`` refuses any other."""

JOB_TIMEOUT_S = 300
"""A job of 64 chat messages takes about a second; retries with backoff a few more. Each
message adds :data:`JOB_TIMEOUT_PER_MESSAGE_S` so a large ``job_batch_size`` is not cut short."""

JOB_TIMEOUT_PER_MESSAGE_S = 1

RESULT_TTL_S = 60
"""A finished job's result is a few counts (its events already went to the writer)."""

FAILURE_TTL_S = 7 * 24 * 3600
"""How long a failed job stays visible to operators (rq-dashboard) before Redis drops it."""

JOBS_PER_ROUND_TRIP = 50
"""Jobs enqueued per Redis transaction: one round trip per group, not two per job."""

_WAITING = frozenset(s.value for s in (JobStatus.QUEUED, JobStatus.SCHEDULED, JobStatus.DEFERRED))
_READ_CHUNK = 500

Message = tuple[str, str]
"""(message id, content)."""


def job_id(model: str, message_ids: Sequence[str]) -> str:
    """The same messages for the same model always give the same id (no ':' for RQ)."""
    digest = hashlib.sha256("\n".join([model, *message_ids]).encode()).hexdigest()
    return f"memq-embed-{digest[:32]}"


def embed_queue(connection: redis.Redis) -> Queue:
    return Queue(names.QUEUE_EMBED, connection=connection, serializer=JSONSerializer)


def chunked(messages: Iterable[Message], size: int) -> Iterator[list[Message]]:
    chunk: list[Message] = []
    for message in messages:
        chunk.append(message)
        if len(chunk) == size:
            yield chunk
            chunk = []
    if chunk:
        yield chunk


def enqueue(
    connection: redis.Redis, model: str, messages: Iterable[Message], batch_size: int
) -> int:
    """Enqueue ``messages`` in jobs of ``batch_size``; returns how many jobs were added.

    ``messages`` may be a generator: it is consumed :data:`JOBS_PER_ROUND_TRIP` jobs at a time.
    """
    queue = embed_queue(connection)
    added = 0
    group: list[list[Message]] = []
    for chunk in chunked(messages, batch_size):
        group.append(chunk)
        if len(group) == JOBS_PER_ROUND_TRIP:
            added += _enqueue_group(queue, model, group)
            group = []
    return added + (_enqueue_group(queue, model, group) if group else 0)


def _enqueue_group(queue: Queue, model: str, chunks: list[list[Message]]) -> int:
    """New ids in one atomic round trip; ids that exist (or a lost race) one by one."""
    jids = [job_id(model, [mid for mid, _ in chunk]) for chunk in chunks]
    with queue.connection.pipeline() as pipe:
        try:
            keys = [Job.key_for(jid) for jid in jids]
            pipe.watch(*keys)  # type: ignore[no-untyped-call]  # redis-py leaves it untyped
            exists = _existing(pipe, keys)
            pipe.multi()
            fresh = [(jid, c) for jid, c, e in zip(jids, chunks, exists, strict=True) if not e]
            if fresh:
                queue.enqueue_many([_job_data(jid, model, c) for jid, c in fresh], pipeline=pipe)
                pipe.execute()
        except redis.exceptions.WatchError:  # another enqueuer touched one of these ids
            exists = [True] * len(jids)
    slow = [(jid, c) for jid, c, e in zip(jids, chunks, exists, strict=True) if e]
    return len(jids) - len(slow) + sum(_enqueue_one(queue, model, jid, c) for jid, c in slow)


def _existing(pipe: Any, keys: list[str]) -> list[bool]:
    # A watching pipeline runs commands at once: one EXISTS for all keys answers the usual
    # case (none exists) in one round trip; only otherwise is each key asked.
    if not pipe.exists(*keys):
        return [False] * len(keys)
    return [bool(pipe.exists(key)) for key in keys]


def _enqueue_one(queue: Queue, model: str, jid: str, messages: Sequence[Message]) -> bool:
    try:
        _enqueue_unique(queue, jid, model, messages)
        return True
    except DuplicateJobError:
        pass
    if _in_flight(queue.connection, jid):
        return False
    _delete(queue.connection, jid)
    try:
        _enqueue_unique(queue, jid, model, messages)
    except DuplicateJobError:  # another enqueuer got there between our delete and enqueue
        return False
    return True


def _job_options(jid: str, model: str, messages: Sequence[Message]) -> dict[str, Any]:
    return {
        "kwargs": {"model": model, "messages": [{"message_id": mid, "content": text}
                                                for mid, text in messages]},
        "job_id": jid,
        "meta": {"model": model, "message_ids": [mid for mid, _ in messages]},
        # The default description is the call with every text in it: keep it short.
        "description": f"embed {len(messages)} messages with {model}",
        "timeout": JOB_TIMEOUT_S + JOB_TIMEOUT_PER_MESSAGE_S * len(messages),
        "result_ttl": RESULT_TTL_S,
        "failure_ttl": FAILURE_TTL_S,
    }


def _job_data(jid: str, model: str, messages: Sequence[Message]) -> Any:
    return Queue.prepare_data(EMBED_FUNCTION, **_job_options(jid, model, messages))


def _enqueue_unique(queue: Queue, jid: str, model: str, messages: Sequence[Message]) -> None:
    queue.enqueue_call(EMBED_FUNCTION, unique=True, **_job_options(jid, model, messages))


def _in_flight(connection: redis.Redis, jid: str) -> bool:
    jobs = read_jobs(connection, [jid])
    if not jobs:
        return False
    return jobs[0].in_flight(Liveness.read(connection, [jobs[0].worker_name]))


def _delete(connection: redis.Redis, jid: str) -> None:
    with contextlib.suppress(NoSuchJobError):
        Job.fetch(jid, connection=connection, serializer=JSONSerializer).delete()


# -- what is in flight ----------------------------------------------------------------


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
class JobInfo:
    """The fields of an embed job needed to tell whether it is in flight."""

    id: str
    status: str
    model: str
    message_ids: tuple[str, ...]
    worker_name: str
    started_at: str

    def in_flight(self, liveness: Liveness) -> bool:
        if self.status in _WAITING:
            return True
        if self.status == JobStatus.STARTED.value:
            return liveness.runs(self.worker_name, self.started_at)
        return False


_FIELDS = ("status", "meta", "worker_name", "started_at")


def read_jobs(connection: redis.Redis, job_ids: Sequence[str]) -> list[JobInfo]:
    """The jobs that still exist among ``job_ids``, reading a few small fields of each."""
    jobs: list[JobInfo] = []
    for start in range(0, len(job_ids), _READ_CHUNK):
        chunk = job_ids[start:start + _READ_CHUNK]
        pipe = connection.pipeline(transaction=False)
        for jid in chunk:
            pipe.hmget(Job.key_for(jid), _FIELDS)
        for jid, values in zip(chunk, pipe.execute(), strict=True):
            info = _job_info(jid, values)
            if info is not None:
                jobs.append(info)
    return jobs


def _job_info(jid: str, values: list[bytes | None]) -> JobInfo | None:
    status, meta_raw, worker, started = (v.decode() if v else "" for v in values)
    if not status:
        return None  # deleted or expired since it was listed
    meta = _meta(meta_raw)
    ids = meta.get("message_ids")
    return JobInfo(
        id=jid,
        status=status,
        model=str(meta.get("model", "")),
        message_ids=tuple(str(i) for i in ids) if isinstance(ids, list) else (),
        worker_name=worker,
        started_at=started,
    )


def _meta(raw: str) -> dict[str, Any]:
    try:
        meta = orjson.loads(raw) if raw else {}
    except orjson.JSONDecodeError:
        return {}  # a job not written by memq (pickled meta): it carries no message ids
    return meta if isinstance(meta, dict) else {}


def live_jobs(connection: redis.Redis) -> list[JobInfo]:
    """Embed jobs that will run or are running now (see the module docstring)."""
    queue = embed_queue(connection)
    ids: list[str] = list(queue.get_job_ids())
    registries = (
        ScheduledJobRegistry(queue=queue),  # type: ignore[no-untyped-call]  # rq leaves it untyped
        DeferredJobRegistry(queue=queue),
        StartedJobRegistry(queue=queue),
    )
    for registry in registries:
        ids.extend(registry.get_job_ids(cleanup=False))
    jobs = read_jobs(connection, list(dict.fromkeys(ids)))
    liveness = Liveness.read(connection, (j.worker_name for j in jobs if j.worker_name))
    return [job for job in jobs if job.in_flight(liveness)]


def in_flight(connection: redis.Redis, model: str) -> set[str]:
    """Ids of the messages that a live job will embed with ``model``."""
    return {mid for job in live_jobs(connection) if job.model == model
            for mid in job.message_ids}
