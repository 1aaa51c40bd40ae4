"""Embed jobs in RQ: deterministic ids, enqueueing, and which messages have a job in flight.

The writer (after each commit, and when it reconciles) and ``memq backfill-embeddings``
enqueue through here. The job function lives in ``workers/embed.py`` and is named by its
dotted path: the store does not import the workers. A job carries its messages' text; its
meta repeats their ids and the model, so finding what is in flight reads only that small
field of each job, never the texts.

*In flight* means waiting in the queue (or scheduled, or deferred), or started by a worker
that is still alive: ``store/job_liveness.py`` judges it, since RQ notices a dead worker
only when the job's timeout has passed. A job in the failed registry is not in flight.

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
from typing import Any

import redis
from rq import Queue
from rq.exceptions import DuplicateJobError, NoSuchJobError
from rq.job import Job
from rq.registry import DeferredJobRegistry, ScheduledJobRegistry, StartedJobRegistry

from memq import jobs, names
from memq.store.dispatch import job_liveness
from memq.store.dispatch.job_liveness import JobInfo

EMBED_FUNCTION = jobs.EMBED

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


Message = tuple[str, str]
"""(message id, content)."""


def job_id(model: str, message_ids: Sequence[str]) -> str:
    """The same messages for the same model always give the same id (no ':' for RQ)."""
    digest = hashlib.sha256("\n".join([model, *message_ids]).encode()).hexdigest()
    return f"memq-embed-{digest[:32]}"


def embed_queue(connection: redis.Redis) -> Queue:
    return jobs.queue(names.QUEUE_EMBED, connection)


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
    if job_liveness.in_flight(queue.connection, jid):
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


def _delete(connection: redis.Redis, jid: str) -> None:
    with contextlib.suppress(NoSuchJobError):
        jobs.fetch(jid, connection).delete()


# -- what is in flight ----------------------------------------------------------------


def live_jobs(connection: redis.Redis) -> list[JobInfo]:
    """Embed jobs that will run or are running now (see ``store/job_liveness.py``)."""
    queue = embed_queue(connection)
    ids: list[str] = list(queue.get_job_ids())
    registries = (
        ScheduledJobRegistry(queue=queue),  # type: ignore[no-untyped-call]  # rq leaves it untyped
        DeferredJobRegistry(queue=queue),
        StartedJobRegistry(queue=queue),
    )
    for registry in registries:
        ids.extend(registry.get_job_ids(cleanup=False))
    jobs = job_liveness.read_jobs(connection, list(dict.fromkeys(ids)))
    return job_liveness.live(connection, jobs)


def in_flight(connection: redis.Redis, model: str) -> set[str]:
    """Ids of the messages that a live job will embed with ``model``."""
    return {str(mid) for job in live_jobs(connection) if job.meta.get("model") == model
            for mid in _message_ids(job)}


def _message_ids(job: JobInfo) -> list[object]:
    ids = job.meta.get("message_ids")
    return ids if isinstance(ids, list) else []
