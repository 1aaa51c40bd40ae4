"""Which RQ jobs are in flight: waiting, or running in a worker that is alive."""

from __future__ import annotations

import time
from collections.abc import Iterator

import pytest
import redis
from rq import Queue
from rq.executions import prepare_execution
from rq.job import Job
from rq.worker import SimpleWorker

from memq.config import Config
from memq.store.dispatch import job_liveness
from memq.store.dispatch.job_liveness import JobInfo, Liveness, Run

BORN = "2026-01-01T00:00:00.000000Z"


def started(worker: str = "w1", at: str = "2026-01-01T00:00:10.000000Z") -> JobInfo:
    return JobInfo("j", "started", {}, "2026-01-01T00:00:05.000000Z", (Run(worker, at),))


def test_a_started_job_is_in_flight_only_while_its_worker_lives() -> None:
    assert started().in_flight(Liveness(frozenset({"w1"}), {"w1": BORN}))
    assert not started().in_flight(Liveness(frozenset(), {"w1": BORN}))  # connection gone
    assert not started().in_flight(Liveness(frozenset({"w1"}), {}))  # worker key expired
    # Restarted under the same name after the job started: the job was orphaned.
    reborn = Liveness(frozenset({"w1"}), {"w1": "2026-01-01T00:00:20.000000Z"})
    assert not started().in_flight(reborn)
    # Where CLIENT LIST is refused, the worker's key and birth decide.
    assert started().in_flight(Liveness(None, {"w1": BORN}))


def test_finished_and_failed_jobs_are_not_in_flight() -> None:
    live = Liveness(frozenset(), {})
    for status in ("finished", "failed", "stopped", "canceled", "started"):
        assert not JobInfo("j", status, {}).in_flight(live)
    for status in ("queued", "scheduled", "deferred"):
        assert JobInfo("j", status, {}).in_flight(live)


def test_a_queued_job_with_a_dead_execution_is_not_in_flight() -> None:
    # A worker killed between recording its execution and marking the job started.
    taken = JobInfo("j", "queued", {}, "2026-01-01T00:00:05.000000Z",
                    (Run("w1", "2026-01-01T00:00:10.000000Z"),))
    assert not taken.in_flight(Liveness(frozenset(), {"w1": BORN}))
    assert taken.in_flight(Liveness(frozenset({"w1"}), {"w1": BORN}))


def test_executions_before_the_job_was_enqueued_again_do_not_count() -> None:
    requeued = JobInfo("j", "queued", {}, "2026-01-01T00:00:30.000000Z",
                       (Run("w1", "2026-01-01T00:00:10.000000Z"),))
    assert requeued.in_flight(Liveness(frozenset(), {}))


# -- against a real Redis and real RQ records ----------------------------------------------


@pytest.fixture
def broker(config: Config) -> Iterator[redis.Redis]:
    connection = redis.Redis.from_url(config.redis_url)
    yield connection
    connection.close()


def _taken_but_not_started(url: str, worker_name: str) -> Job:
    """What a worker SIGKILLed between RQ's two preparation round trips leaves behind."""
    own = redis.Redis.from_url(url)  # the worker's connection, named after it by RQ
    try:
        queue = Queue("liveness", connection=own)
        job = queue.enqueue("builtins.len", "abc")
        worker = SimpleWorker([queue], connection=own, name=worker_name)
        worker.register_birth()
        time.sleep(0.01)  # the execution starts after the birth, as in a real worker
        queue.remove(job)  # dequeued
        prepare_execution(worker, job)  # execution + StartedJobRegistry entry, still queued
    finally:
        own.close()  # the SIGKILL
    _until_gone(url, worker_name)
    return job


def _until_gone(url: str, name: str) -> None:
    """Redis drops a closed connection on its next turn: wait for it, briefly."""
    probe = redis.Redis.from_url(url)
    for _ in range(500):
        if name not in {c.get("name") for c in probe.client_list()}:
            return
        time.sleep(0.01)
    pytest.fail(f"Redis still lists a connection named {name}")


@pytest.mark.redis
def test_a_job_taken_by_a_dead_worker_is_not_in_flight(
    broker: redis.Redis, config: Config
) -> None:
    job = _taken_but_not_started(config.redis_url, "gone-worker")
    assert job.get_status(refresh=True) == "queued"
    assert not job_liveness.in_flight(broker, job.id)  # no connection named gone-worker


@pytest.mark.redis
def test_a_job_taken_by_a_live_worker_is_in_flight(broker: redis.Redis, config: Config) -> None:
    job = _taken_but_not_started(config.redis_url, "live-worker")
    holder = redis.Redis.from_url(config.redis_url)
    holder.client_setname("live-worker")
    try:
        assert job_liveness.in_flight(broker, job.id)
    finally:
        holder.close()


@pytest.mark.redis
def test_a_waiting_job_and_a_missing_one(broker: redis.Redis) -> None:
    job = Queue("liveness", connection=broker).enqueue("builtins.len", "abc")
    assert job_liveness.in_flight(broker, job.id)
    assert not job_liveness.in_flight(broker, "no-such-job")
    job.delete()
    assert not job_liveness.in_flight(broker, job.id)
