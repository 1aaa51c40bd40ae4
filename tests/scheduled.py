"""Helpers for the scheduled-task tests: events, the real scheduler and a burst tasks worker."""

from __future__ import annotations

import time
import zlib
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from datetime import datetime, timedelta
from typing import Any

import orjson
import redis
from rq_scheduler import Scheduler

from memq import names
from memq.clock import now_utc, to_rfc3339, uuid7
from memq.config import Config
from memq.events import Event, EventType, encode
from memq.inbox import caught_up, committed_marks, inbox_marks
from memq.jobs import JSONJob
from memq.workers import context
from memq.workers.queues import worker

SCHEDULED_JOBS = Scheduler.scheduled_jobs_key


def task_payload(task_id: str | None = None, **fields: Any) -> dict[str, Any]:
    payload = {"task_id": task_id or uuid7(), "name": "t", "schedule": "every minute",
               "cron_expr": "* * * * *", "prompt": "do it", "oneshot": False,
               "trusted": False, "tz": "UTC", "source": "tool", "run_at": None}
    payload.update(fields)
    return payload


def event(etype: str, payload: dict[str, Any], created_at: datetime | str | None = None,
          event_id: str | None = None) -> Event:
    when = created_at or now_utc()
    stamp = when if isinstance(when, str) else to_rfc3339(when)
    return Event(id=event_id or uuid7(), type=etype, session_id=None, created_at=stamp,
                 payload=payload)


def push(broker: redis.Redis, *events: Event | bytes,
         stream: str = names.ADMIN_INBOX_STREAM) -> None:
    """Raw entries on ``stream`` (the admin's by default: any event is allowed there)."""
    for item in events:
        raw = item if isinstance(item, bytes) else encode(item)
        broker.xadd(stream, {names.EVENT_FIELD: raw})


def eventually(predicate: Callable[[], Any], what: str, timeout: float = 30.0) -> Any:
    """Poll until ``predicate`` is truthy; the timeout only guards against a hang."""
    deadline = time.monotonic() + timeout
    while True:
        value = predicate()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        time.sleep(0.02)


def wait_committed(broker: redis.Redis) -> None:
    """Until the writer has committed every entry sent to the inbox streams so far."""
    marks = inbox_marks(broker)

    def done() -> bool:
        return caught_up(committed_marks(broker), marks)

    eventually(done, "the writer to commit")


def scheduled_jobs(broker: redis.Redis) -> dict[str, float]:
    """Task run job id -> its time (unix seconds) in rq-scheduler."""
    return {m.decode(): s for m, s in broker.zrange(SCHEDULED_JOBS, 0, -1, withscores=True)
            if m.startswith(names.TASK_JOB_PREFIX.encode())}


def job_data(broker: redis.Redis, job_id: str) -> Any:
    """A stored job's data, which must be JSON (RQ zlib-compresses it)."""
    raw = zlib.decompress(broker.hget(f"rq:job:{job_id}", "data"))  # type: ignore[arg-type]
    assert not raw.startswith(b"\x80"), "job data is pickled"
    return orjson.loads(raw)


def agent_inbox(broker: redis.Redis) -> list[dict[str, str]]:
    return [{k.decode(): v.decode() for k, v in fields.items()}
            for _, fields in broker.xrange(names.AGENT_INBOX_STREAM)]


def run_scheduler(broker: redis.Redis) -> set[str]:
    """One pass of the real rq-scheduler: move due jobs onto their queues; their ids."""
    before = set(scheduled_jobs(broker))
    Scheduler(queue_name=names.QUEUE_TASKS, connection=broker, job_class=JSONJob).enqueue_jobs()
    return before - set(scheduled_jobs(broker))


@contextmanager
def worker_context(config: Config, broker: redis.Redis) -> Iterator[None]:
    context.install(context.WorkerContext(config, broker))
    try:
        yield
    finally:
        context.install(None)  # type: ignore[arg-type]


def run_tasks_worker(config: Config, broker: redis.Redis) -> None:
    """A real tasks worker in burst mode, in this process."""
    with worker_context(config, broker):
        worker([names.QUEUE_TASKS], broker).work(burst=True, with_scheduler=False)


def due_daily(task_id: str | None = None, *, days_ago: int = 0, **fields: Any) -> Event:
    """A daily task whose run a minute ago is due; made ``days_ago`` days before that.

    Daily, so that once it fired its next run is a day away and a second pass of the
    scheduler cannot legitimately fire it again within the test.
    """
    slot = now_utc().replace(second=0, microsecond=0) - timedelta(minutes=1)
    created = slot - timedelta(days=days_ago, seconds=30)
    cron = f"{slot.minute} {slot.hour} * * *"
    return event(EventType.TASK_SCHEDULED,
                 task_payload(task_id, cron_expr=cron, schedule=cron, **fields), created)


def due_oneshot(task_id: str | None = None, **fields: Any) -> Event:
    run_at = now_utc() - timedelta(seconds=5)
    cron = f"{run_at.minute} {run_at.hour} {run_at.day} {run_at.month} *"
    return event(EventType.TASK_SCHEDULED,
                 task_payload(task_id, cron_expr=cron, oneshot=True, schedule="in 1 minute",
                              run_at=to_rfc3339(run_at), **fields),
                 run_at - timedelta(minutes=1))
