"""RQ plumbing shared by every job family: JSON jobs, the function allow-list, queues.

Jobs are data, not code: they are serialised with RQ's JSON serializer (never pickle), and
a worker runs only functions listed in :data:`JOB_FUNCTIONS`, so a job planted in a queue
that names anything else is refused. rq-scheduler has no serializer option, so the same
:class:`JSONJob` class is handed to the scheduler, the queues and the workers.
"""

from __future__ import annotations

import inspect
import logging
import time
from collections.abc import Callable
from typing import Any

import redis
from rq import Queue, SimpleWorker
from rq.exceptions import DeserializationError
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


class RefusedJobData(ValidationError, DeserializationError):
    """A job whose data is not memq's JSON (a pickle, say): it is refused, never loaded."""


class JSONJob(Job):
    """An RQ job that defaults to the JSON serializer and runs only memq's job functions."""

    def __init__(
        self, id: str | None = None, connection: redis.Redis | None = None, serializer: Any = None
    ) -> None:
        super().__init__(id, connection, serializer or JSONSerializer)

    def _deserialize_data(self) -> None:
        try:
            super()._deserialize_data()  # type: ignore[no-untyped-call]  # rq leaves it untyped
        except DeserializationError as exc:
            raise RefusedJobData(
                f"refusing job {self.id}: its data is not a JSON job ({exc.__cause__}); memq "
                "jobs are JSON only and a pickle is never loaded") from exc

    @property
    def func(self) -> Any:
        if self.func_name not in allowed_functions():
            raise ValidationError(f"refusing job {self.id}: {self.func_name!r} is not a memq job")
        if self.instance is not None:
            raise ValidationError(f"refusing job {self.id}: memq jobs are functions, "
                                  f"not methods of {self.instance!r:.60}")
        function = super().func
        try:
            # Forged arguments: a clear refusal rather than a TypeError from the call.
            inspect.signature(function).bind(*self.args, **self.kwargs)
        except TypeError as exc:
            raise ValidationError(f"refusing job {self.id}: {self.func_name} {exc}") from None
        return function

    # rq imports and calls any function a job's hash names as a callback, even after the
    # job itself was refused. memq registers none: whatever a forged job names is ignored.

    @property
    def success_callback(self) -> None:
        return None

    @property
    def failure_callback(self) -> None:
        return None

    @property
    def stopped_callback(self) -> None:
        return None


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
            job_id=job.id, function=_function_name(job), queue=queue.name, outcome=outcome,
            duration_ms=round((time.perf_counter() - started) * 1000, 2))
        return ok


def _function_name(job: Job) -> str:
    # A forged job's data may not even decode: it must fail alone, not stop the worker.
    try:
        return str(job.func_name)
    except DeserializationError:
        return "<not JSON>"


def worker(queue_names: list[str], connection: redis.Redis, *, name: str | None = None) -> Any:
    """An in-process worker: it keeps a loaded model warm between jobs (no fork per job)."""
    return LoggingWorker(
        [queue(n, connection) for n in queue_names],
        connection=connection,
        serializer=JSONSerializer,
        job_class=JSONJob,
        name=name,
    )
