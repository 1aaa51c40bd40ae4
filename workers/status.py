"""What ``memq status`` and ``memq metrics`` report about the job side: memq's RQ queues by
job state, the workers serving them, and the jobs rq-scheduler holds. Only reads Redis.
"""

from __future__ import annotations

from typing import Any

import redis
from rq import Worker

from memq import names
from memq.jobs import queue

SCHEDULED_JOBS_KEY = "rq:scheduler:scheduled_jobs"
"""rq-scheduler's sorted set of pending runs (its ``Scheduler.scheduled_jobs_key``)."""


def queues(client: redis.Redis) -> dict[str, dict[str, int]]:
    """Per memq queue: jobs waiting, running, failed, scheduled for a retry, deferred, done."""
    report = {}
    for name in names.QUEUES:
        q = queue(name, client)
        report[name] = {
            "queued": q.count,
            "started": q.started_job_registry.get_job_count(cleanup=False),
            "failed": q.failed_job_registry.get_job_count(cleanup=False),
            "scheduled": q.scheduled_job_registry.get_job_count(cleanup=False),
            "deferred": q.deferred_job_registry.get_job_count(cleanup=False),
            "finished": q.finished_job_registry.get_job_count(cleanup=False),
        }
    return report


def workers(client: redis.Redis) -> list[dict[str, Any]]:
    """Every registered RQ worker that serves at least one memq queue."""
    report = []
    for worker in Worker.all(connection=client):
        served = [n for n in worker.queue_names() if n in names.QUEUES]
        if not served:
            continue
        beat = worker.last_heartbeat
        report.append({
            "name": worker.name,
            "state": str(worker.get_state()),
            "queues": served,
            "current_job": worker.get_current_job_id(),
            "hostname": worker.hostname,
            "pid": worker.pid,
            "last_heartbeat": beat.isoformat() if beat is not None else None,
        })
    return sorted(report, key=lambda w: (w["queues"], w["name"]))


def scheduler(client: redis.Redis) -> dict[str, Any]:
    """How many runs rq-scheduler holds, and when the next one is due (UNIX seconds)."""
    first = client.zrange(SCHEDULED_JOBS_KEY, 0, 0, withscores=True)
    return {
        "scheduled_jobs": int(client.zcard(SCHEDULED_JOBS_KEY)),
        "next_at": float(first[0][1]) if first else None,
    }
