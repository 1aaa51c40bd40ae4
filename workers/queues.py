"""The worker process: an in-process RQ worker that logs one line per job.

What a job is, and which functions may run, is defined in :mod:`memq.jobs`.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import redis
from rq import Queue, SimpleWorker
from rq.exceptions import DeserializationError, StopRequested
from rq.job import Job
from rq.worker import WorkerStatus

from memq import jobs
from memq.logs import log_routine, routine

logger = logging.getLogger("memq.jobs")

PUBSUB_WAKE_S = 1.0
"""How often the worker's command thread wakes to see whether it should end."""


class _MainThread:
    """Where the worker's loop is, for its stop signal's handler. Signals are handled in the
    main thread, which runs the loop: one worker at a time per process."""

    blocked = False
    """In the blocking pop, the one place an idle worker's stop may interrupt."""
    stopping = False
    """A stop arrived elsewhere: the next pop ends the loop instead of blocking."""


@contextmanager
def _interruptible(connection: redis.Redis | None, timeout: int | None) -> Iterator[None]:
    if timeout is None:  # burst mode's pop does not block: the loop sees the stop itself
        yield
        return
    if _MainThread.stopping:
        raise StopRequested()
    _MainThread.blocked = True
    try:
        yield
    except StopRequested:
        # Cut between the send and the reply, a BLMOVE still waits on the server for its
        # (now pooled) connection: drop the idle connections rather than hand it on.
        if connection is not None:
            connection.connection_pool.disconnect(inuse_connections=False)
        raise
    finally:
        _MainThread.blocked = False


class StoppableQueue(Queue):
    """A queue whose blocking pop a worker's stop may interrupt (see
    :meth:`LoggingWorker._shutdown`). A stop that cuts in while the reply of a pop that
    did move a job is in flight leaves that job in RQ's intermediate list, which RQ's
    maintenance fails a minute later; embed jobs are re-sent by the embedding backlog."""

    @classmethod
    def lmove(cls, connection: redis.Redis, queue_key: str, timeout: int | None) -> Any:
        with _interruptible(connection, timeout):
            return super().lmove(connection, queue_key, timeout)

    @classmethod
    def lpop(cls, queue_keys: Any, timeout: int | None,
             connection: redis.Redis | None = None) -> Any:
        with _interruptible(connection, timeout):
            return super().lpop(queue_keys, timeout, connection=connection)


class LoggingWorker(SimpleWorker):
    """A :class:`SimpleWorker` that logs one structured line when each job ends, and stops
    within about a second when idle, cleanly wherever the stop signal lands."""

    queue_class = StoppableQueue

    def _install_signal_handlers(self) -> None:
        _MainThread.stopping = False
        super()._install_signal_handlers()  # type: ignore[no-untyped-call]

    def _shutdown(self) -> None:
        """RQ's, but an idle worker's stop is raised only in the blocking pop.

        RQ raises it at whatever line the signal lands on: between a pipeline's send and
        its replies, the replies stayed unread on a pooled connection, the next pipeline
        read them ("Wrong number of response items"), and the worker exited 1 (RQ #2175).
        """
        if self.get_state() == WorkerStatus.BUSY:
            super()._shutdown()  # type: ignore[no-untyped-call]
            return
        self._stop_requested = True
        _MainThread.stopping = True
        if _MainThread.blocked:
            raise StopRequested()

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
        [jobs.queue(n, connection, job_class, StoppableQueue) for n in queue_names],
        connection=connection,
        serializer=jobs.SERIALIZER,
        job_class=job_class,
        name=name,
    )
