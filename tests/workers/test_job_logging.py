"""Every RQ job logs one structured line when it ends: id, function, duration, outcome."""

from __future__ import annotations

import logging

import pytest
import redis

from memq import names
from memq.jobs import JOB_FUNCTIONS, JSONJob, queue
from memq.workers.queues import worker

pytestmark = pytest.mark.redis


def add(a: int, b: int) -> int:
    return a + b


class AddingJob(JSONJob):
    allowed = JOB_FUNCTIONS | {f"{__name__}.add"}


def ended(caplog) -> list[dict]:
    return [getattr(r, "fields", {}) for r in caplog.records if r.getMessage() == "job ended"]


def test_a_finished_and_a_failed_job_each_log_one_line(redis_url: str, caplog) -> None:
    connection = redis.Redis.from_url(redis_url)
    q = queue(names.QUEUE_TASKS, connection)
    q.enqueue(add, kwargs={"a": 1, "b": 2}, job_id="adds")
    q.enqueue("os.getcwd", job_id="refused")
    with caplog.at_level(logging.INFO, logger="memq.jobs"):
        worker([names.QUEUE_TASKS], connection, job_class=AddingJob).work(burst=True)
    lines = {fields["job_id"]: fields for fields in ended(caplog)}
    assert set(lines) == {"adds", "refused"}
    assert lines["adds"]["outcome"] == "finished"
    assert lines["adds"]["function"].endswith("test_job_logging.add")
    assert lines["refused"]["outcome"] == "failed"
    assert lines["refused"]["function"] == "os.getcwd"
    assert all(f["duration_ms"] >= 0 and f["queue"] == names.QUEUE_TASKS
               for f in lines.values())
