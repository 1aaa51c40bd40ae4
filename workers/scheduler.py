"""rq-scheduler for memq: moves due runs onto their queues, and treats a job as data.

Two things stock rq-scheduler does with what it reads from Redis, and this one does not:
it imports any class a job's meta names as ``queue_class_name`` (code chosen by whoever can
write to Redis), and a job whose data cannot be decoded stops its loop. Here the queue is
always memq's JSON queue, and an undecodable job is taken off the schedule and logged.

It also keeps its own registrations (the periodic consolidation pass) in place: they are
checked on every tick, so a Redis that lost its data (FLUSHALL, a restart without
persistence) gets them back without a restart of the scheduler.
"""

from __future__ import annotations

import logging
import signal
from collections.abc import Callable
from typing import Any, NoReturn

from rq.exceptions import DeserializationError
from rq_scheduler import Scheduler

from memq.jobs import SERIALIZER, JSONJob
from memq.logs import log

logger = logging.getLogger("memq.scheduler")


class JSONScheduler(Scheduler):  # type: ignore[misc]  # rq-scheduler has no type hints
    """A :class:`Scheduler` of :class:`JSONJob` only."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        kwargs["job_class"] = JSONJob
        super().__init__(*args, **kwargs)
        self.registrations: list[Callable[[JSONScheduler], object]] = []
        """Idempotent calls that (re)register a schedule; run before every tick."""

    def enqueue_jobs(self) -> Any:
        for register in self.registrations:
            register(self)
        return super().enqueue_jobs()

    def _install_signal_handlers(self) -> None:
        """Stop on SIGINT or SIGTERM, with no Redis call inside the handler.

        rq-scheduler's handler registers the scheduler's death and frees its lock from
        inside the signal handler, that is in the middle of whatever Redis call the loop
        was making (a connection pool's lock held, a reply not yet read); :meth:`run` does
        both anyway, in its ``finally``, once the exit unwinds the loop.
        """

        def stop(signum: int, frame: object) -> NoReturn:
            self.log.info("Shutting down RQ scheduler...")
            raise SystemExit

        signal.signal(signal.SIGINT, stop)
        signal.signal(signal.SIGTERM, stop)

    def get_queue_for_job(self, job: JSONJob) -> Any:
        key = f"{self.queue_class.redis_queue_namespace_prefix}{job.origin}"
        return self.queue_class.from_queue_key(key, connection=self.connection,
                                               job_class=JSONJob, serializer=SERIALIZER)

    def enqueue_job(self, job: JSONJob) -> None:
        try:
            job.func_name  # noqa: B018  # decodes the data: JSON, or refused
        except DeserializationError as exc:
            self.connection.zrem(self.scheduled_jobs_key, job.id)
            log(logger, "dropped a scheduled job that is not JSON", logging.ERROR,
                job_id=job.id, error=str(exc))
            return
        super().enqueue_job(job)
