"""The worker process: an in-process RQ worker that logs one line per job.

What a job is, and which functions may run, is defined in :mod:`memq.jobs`.
"""

from __future__ import annotations

import logging
import time
from typing import Any

import redis
from rq import Queue, SimpleWorker
from rq.exceptions import DeserializationError
from rq.job import Job

from memq import jobs
from memq.logs import log_routine, routine

logger = logging.getLogger("memq.jobs")

PUBSUB_WAKE_S = 1.0
"""How often the worker's command thread wakes to see whether it should end."""


class LoggingWorker(SimpleWorker):
    """A :class:`SimpleWorker` that logs one structured line when each job ends, and stops
    within about a second when idle."""

    def subscribe(self) -> None:
        """RQ's, but the command thread waits :data:`PUBSUB_WAKE_S` at a time, not 60 s.

        RQ unsubscribes, then stops the thread; once the unsubscription is read, the thread
        waits to be subscribed again, up to its sleep time, and redis-py 8 joins it with no
        timeout: an idle worker took up to a minute to stop, and ``memq up`` killed it
        after 30 s (3 stops in 8)."""
        self.log.info("Worker %s: subscribing to channel %s", self.name,
                      self.pubsub_channel_name)
        self.pubsub = self.connection.pubsub()
        self.pubsub.subscribe(**{self.pubsub_channel_name: self.handle_payload})
        # RQ annotates the attribute as None only; it holds this thread.
        self.pubsub_thread = self.pubsub.run_in_thread(  # type: ignore[assignment]
            sleep_time=PUBSUB_WAKE_S, daemon=True,
            exception_handler=self._pubsub_exception_handler)

    def perform_job(self, job: Job, queue: Queue, execution: Any) -> bool:
        started = time.perf_counter()
        with routine():  # the job's own lines, like this one, are for JSON logs only
            ok = bool(super().perform_job(job, queue, execution))
        # After a failure RQ has already decided: "failed", or "scheduled"/"queued" for a retry.
        status = job.get_status(refresh=False)
        outcome = "finished" if ok else str(getattr(status, "value", status) or "failed")
        log_routine(logger, "job ended", logging.INFO if ok else logging.WARNING,
            job_id=job.id, function=_function_name(job), queue=queue.name, outcome=outcome,
            duration_ms=round((time.perf_counter() - started) * 1000, 2))
        return ok


def _function_name(job: Job) -> str:
    # A forged job's data may not even decode: it must fail alone, not stop the worker.
    try:
        return str(job.func_name)
    except DeserializationError:
        return "<not JSON>"


def worker(
    queue_names: list[str], connection: redis.Redis, *, name: str | None = None,
    job_class: type[jobs.JSONJob] = jobs.JSONJob,
) -> Any:
    """An in-process worker: it keeps a loaded model warm between jobs (no fork per job)."""
    return LoggingWorker(
        [jobs.queue(n, connection, job_class) for n in queue_names],
        connection=connection,
        serializer=jobs.SERIALIZER,
        job_class=job_class,
        name=name,
    )
