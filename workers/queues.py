"""RQ plumbing shared by every job family: JSON jobs, the function allow-list, queues.

Jobs are data, not code: they are serialised with RQ's JSON serializer (never pickle), and
a worker runs only functions listed in :data:`JOB_FUNCTIONS`, so a job planted in a queue
that names anything else is refused. rq-scheduler has no serializer option, so the same
:class:`JSONJob` class is handed to the scheduler, the queues and the workers.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from typing import Any

import redis
from rq import Queue, SimpleWorker
from rq.job import Job
from rq.serializers import JSONSerializer

from memq.errors import ValidationError
from memq.logs import log

logger = logging.getLogger("memq.jobs")

JOB_FUNCTIONS: frozenset[str] = frozenset()
"""Dotted paths of the only functions a memq worker will run; job modules register here."""

_REGISTERED: set[str] = set()


def job_function(func: Callable[..., Any]) -> Callable[..., Any]:
    """Decorator: allow ``func`` to run as a memq job."""
    _REGISTERED.add(f"{func.__module__}.{func.__qualname__}")
    return func


def allowed_functions() -> frozenset[str]:
    # Importing the job modules registers their functions.
    import workers.jobs  # noqa: F401

    return frozenset(_REGISTERED) | JOB_FUNCTIONS


class JSONJob(Job):
    """An RQ job that defaults to the JSON serializer and runs only memq's job functions."""

    def __init__(
        self, id: str | None = None, connection: redis.Redis | None = None, serializer: Any = None
    ) -> None:
        super().__init__(id, connection, serializer or JSONSerializer)

    @property
    def func(self) -> Any:
        if self.func_name not in allowed_functions():
            raise ValidationError(f"refusing job {self.id}: {self.func_name!r} is not a memq job")
        return super().func


def queue(name: str, connection: redis.Redis) -> Queue:
    return Queue(name, connection=connection, serializer=JSONSerializer, job_class=JSONJob)


class LoggingWorker(SimpleWorker):
    """A :class:`SimpleWorker` that logs one structured line when each job ends."""

    def perform_job(self, job: Job, queue: Queue, execution: Any) -> bool:
        started = time.perf_counter()
        ok = bool(super().perform_job(job, queue, execution))
        # After a failure RQ has already decided: "failed", or "scheduled"/"queued" for a retry.
        status = job.get_status(refresh=False)
        outcome = "finished" if ok else str(getattr(status, "value", status) or "failed")
        log(logger, "job ended", logging.INFO if ok else logging.WARNING,
            job_id=job.id, function=job.func_name, queue=queue.name, outcome=outcome,
            duration_ms=round((time.perf_counter() - started) * 1000, 2))
        return ok


def worker(queue_names: list[str], connection: redis.Redis, *, name: str | None = None) -> Any:
    """An in-process worker: it keeps a loaded model warm between jobs (no fork per job)."""
    return LoggingWorker(
        [queue(n, connection) for n in queue_names],
        connection=connection,
        serializer=JSONSerializer,
        job_class=JSONJob,
        name=name,
    )
