"""A worker stopped by SIGTERM while idle ends cleanly wherever the signal lands.

RQ raises its stop exception from the signal handler at whatever line the idle worker is
on. Landing between a command's send and its reply left that reply unread on a pooled
connection: the next pipeline read it ("Wrong number of response items from pipeline
execution"), and ``memq up`` saw the embed worker exit 1 (once in 9 runs of
``tests/faults/test_private.py``). The stop is now raised only in the blocking pop; landing
anywhere else, it ends the loop at the next pop.
"""

from __future__ import annotations

import os
import signal
import threading
from collections.abc import Iterator
from contextlib import contextmanager

import pytest
import redis
from redis.connection import AbstractConnection
from rq.worker import BaseWorker

from memq import names
from memq.jobs import JOB_FUNCTIONS, JSONJob, queue
from memq.workers.queues import StoppableQueue, worker

pytestmark = pytest.mark.redis

BLOCKING = {b"BLMOVE", b"BLPOP"}
"""The pop an idle worker blocks in: BLMOVE for one queue (RQ 3 on Redis 6.2+), else BLPOP."""


def test_an_idle_worker_stops_cleanly_wherever_sigterm_lands(redis_url: str) -> None:
    """Each command an idle worker sends until it blocks, then the blocked worker."""
    nth = 0
    while True:
        nth += 1
        sent = stopped_after(nth, redis_url)
        # Blocked before its nth command: that signal found it blocked, the last case.
        if BLOCKING & set(sent[:nth - 1]):
            break
    assert nth > 10  # the worker's registration, maintenance and heartbeat came first


def stopped_after(nth: int, redis_url: str) -> list[bytes]:
    connection = redis.Redis.from_url(redis_url)
    idle = worker([names.QUEUE_TASKS], connection)
    with own_signal_handlers(), pytest.MonkeyPatch.context() as patch:
        sent = signal_after_send(patch, idle, nth, redis_url)
        assert idle.work(with_scheduler=False) is False
    assert BaseWorker.count(connection=connection) == 0, sent  # it said it was gone
    # The pooled connections answer what they are asked, not an older command's reply.
    with connection.pipeline() as pipe:
        assert pipe.set("a", "1").get("a").incr("n").execute() == [True, b"1", nth], sent
    # No BLMOVE is left on the server to take a job for a worker that has stopped.
    other = redis.Redis.from_url(redis_url)
    key = f"rq:queue:{names.QUEUE_TASKS}"
    other.rpush(key, "a-job-id")
    assert other.lpop(key) == b"a-job-id", sent
    return sent


@contextmanager
def own_signal_handlers() -> Iterator[None]:
    """RQ installs its SIGINT/SIGTERM handlers for good; the test process gets its own back."""
    saved = {s: signal.getsignal(s) for s in (signal.SIGINT, signal.SIGTERM)}
    try:
        yield
    finally:
        for s, handler in saved.items():
            signal.signal(s, handler)


def signal_after_send(patch: pytest.MonkeyPatch, idle: BaseWorker, nth: int,
                      redis_url: str) -> list[bytes]:
    """SIGTERM this process right after the worker's ``nth`` command is sent, before its
    reply is read; if the worker blocks in its pop first, once it is blocked there.

    Counted from when the worker's stop handler is in place: before, SIGTERM ends a
    starting worker as it ends any process (exit status -15, which ``memq up`` accepts)."""
    sent: list[bytes] = []
    real_send = AbstractConnection.send_packed_command

    def send(self: AbstractConnection, command: object, check_health: bool = True) -> None:
        real_send(self, command, check_health)
        handler = signal.getsignal(signal.SIGTERM)
        if threading.current_thread() is not threading.main_thread() \
                or getattr(handler, "__self__", None) is not idle:
            return
        sent.append(_name(command))
        if len(sent) == nth:
            os.kill(os.getpid(), signal.SIGTERM)
        elif sent[-1] in BLOCKING:
            threading.Thread(target=_signal_once_blocked, args=(redis_url,), daemon=True).start()

    patch.setattr(AbstractConnection, "send_packed_command", send)
    return sent


def _name(command: object) -> bytes:
    packed = command if isinstance(command, bytes) else b"".join(command)  # type: ignore[arg-type]
    return packed.split(b"\r\n")[2].upper()


def _signal_once_blocked(redis_url: str) -> None:
    observer = redis.Redis.from_url(redis_url)
    while not any(c["cmd"].encode().upper() in BLOCKING for c in observer.client_list()):
        pass
    os.kill(os.getpid(), signal.SIGTERM)


def stopped_midway(value: int) -> int:
    """A job during which its worker is told to stop."""
    os.kill(os.getpid(), signal.SIGTERM)
    return value * 2


class StoppedJob(JSONJob):
    allowed = JOB_FUNCTIONS | {f"{__name__}.stopped_midway"}


def test_a_busy_worker_finishes_its_job_then_stops_and_takes_no_other(redis_url: str) -> None:
    connection = redis.Redis.from_url(redis_url)
    tasks = queue(names.QUEUE_TASKS, connection, StoppedJob, StoppableQueue)
    first = tasks.enqueue(stopped_midway, 21)
    second = tasks.enqueue(stopped_midway, 1)
    busy = worker([names.QUEUE_TASKS], connection, job_class=StoppedJob)
    with own_signal_handlers():
        assert busy.work(with_scheduler=False) is True
    assert first.return_value(refresh=True) == 42
    assert tasks.job_ids == [second.id]
    assert BaseWorker.count(connection=connection) == 0
