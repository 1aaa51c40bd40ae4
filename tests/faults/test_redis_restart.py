"""Redis restarted (with its append-only file) under load.

What clients get: a send that meets a refused or dropped connection is retried with
backoff for ``[client] retry_for_s`` (5 s by default) and only then raises BrokerError, so a
restart shorter than that is invisible to agents; ``flush`` rides it out within its own
timeout. The writer and the workers reconnect by themselves, and nothing acknowledged is
lost: what the writer committed is in SQLite, and what it had not yet committed is in the
append-only file.
"""

from __future__ import annotations

import threading
import time
from pathlib import Path

import pytest
import redis

from memq import MemoryClient, names
from memq.clock import now_rfc3339, uuid7
from memq.config import ClientConfig, Config
from memq.errors import BrokerError
from memq.jobs import queue, task_run_digest
from memq.store.dispatch.task_runs import RUN_TASK
from memq.testing import RedisServer, inbox_entries
from memq.workers.context import WorkerContext
from memq.workers.tasks import TaskRun
from tests.faults import figures
from tests.faults.load import Load, embedded_event, verify
from tests.faults.procs import Proc, start_writer, wait_until

pytestmark = [pytest.mark.faults, pytest.mark.redis]

SEED = 7


@pytest.fixture
def aof_config(aof_redis: RedisServer, tmp_path: Path) -> Config:
    return Config(redis_url=aof_redis.url, db_path=str(tmp_path / "memq.db"))


@pytest.mark.slow
def test_writer_and_worker_ride_out_a_redis_restart(
    aof_redis: RedisServer, aof_config: Config, tmp_path: Path
) -> None:
    writer = start_writer(aof_config, tmp_path / "writer.log")
    worker = Proc(tmp_path / "worker.log", "worker", "tasks", "--redis-url", aof_config.redis_url)
    load = Load(aof_config, seed=SEED, pause_s=0.01)
    try:
        with MemoryClient(config=aof_config) as client:
            client.schedule_task("ping", "every day at 9am", "say hello")
            client.flush(30)
            (task,) = client.tasks()
        load.start()
        time.sleep(1.0)
        aof_redis.restart()  # SIGTERM: Redis writes its append-only file and exits
        time.sleep(1.5)
        sent = load.finish()
        last = load.client.append("after", "user", "after the restart")
        load.client.flush(60)
        sent.appends[last] = "after the restart"
        assert writer.alive, writer.output()[-2000:]
        _fire(aof_config, task.id)  # the worker, too, serves jobs again
        wait_until(lambda: _last_run(aof_config, task.id) is not None,
                   "the worker to run a job after the restart", timeout=60)
    finally:
        load.stop.set()
        assert writer.terminate() == 0, writer.output()[-2000:]
        worker.terminate()
        load.client.close()
    verdict = verify(aof_config, sent)
    figures.add("redis_restarts")
    figures.add("appends", len(sent.appends))
    figures.add("events", sent.events)
    figures.add("lost", len(verdict.lost))
    figures.add("duplicated", verdict.duplicated)
    assert sent.broker_errors == []  # the clients waited the restart out...
    # ...and did have to wait (the client's appends, or the worker-shaped result sends)
    assert load.client.outbox.retried + load.worker.retried > 0
    assert verdict.lost == []
    assert verdict.problems == []
    assert "retrying" in writer.output() or "redis unavailable" in writer.output()
    assert "Traceback" not in writer.output()


def _fire(config: Config, task_id: str) -> None:
    """A run of the task, as rq-scheduler would move it onto the queue."""
    job = {"task_id": task_id, "name": "ping", "prompt": "say hello", "trusted": False,
           "oneshot": False, "paused": False, "scheduled_for": now_rfc3339()}
    connection = redis.Redis.from_url(config.redis_url)
    run = TaskRun.from_job(job)  # registered, as the writer registers what it schedules
    connection.set(names.task_run_key(run.task_id, run.slot), task_run_digest(job))
    queue(names.QUEUE_TASKS, connection).enqueue(RUN_TASK, task=job)


def _last_run(config: Config, task_id: str) -> str | None:
    with MemoryClient(config=config) as client:
        return client.task(task_id).last_run_at


def test_a_send_waits_out_a_short_outage(aof_redis: RedisServer, aof_config: Config) -> None:
    with MemoryClient(config=aof_config) as client:
        client.append("s1", "user", "before")
        aof_redis.stop()
        restarter = _restart_later(aof_redis, after_s=1.0)
        started = time.monotonic()
        client.append("s1", "user", "during")  # retried until Redis is back
        waited = time.monotonic() - started
        restarter.join()
        entries = inbox_length(aof_config)
    assert waited >= 0.5
    assert entries == 2  # "before" survived in the append-only file, "during" was sent


def test_a_worker_send_waits_out_a_short_outage(
    aof_redis: RedisServer, aof_config: Config
) -> None:
    worker = WorkerContext(aof_config, redis.Redis.from_url(aof_config.redis_url))
    event = embedded_event(aof_config, uuid7())
    aof_redis.stop()
    restarter = _restart_later(aof_redis, after_s=1.0)
    started = time.monotonic()
    assert worker.send([event]) == 1  # retried until Redis is back, not failed
    waited = time.monotonic() - started
    restarter.join()
    assert waited >= 0.5
    assert worker.retried > 0
    assert inbox_length(aof_config) == 1


def test_a_longer_outage_is_a_broker_error_naming_redis(
    aof_redis: RedisServer, aof_config: Config
) -> None:
    config = aof_config.replace(client=ClientConfig(retry_for_s=0.3),
                                redis_url=aof_config.redis_url.replace("127.0.0.1", "localhost"))
    with MemoryClient(config=config) as client:
        aof_redis.stop()
        try:
            with pytest.raises(BrokerError, match=r"sending an event failed: Redis at "
                               r"redis://localhost:\d+/0 did not answer for 0.3 s"):
                client.append("s1", "user", "lost?")
            client.outbox.last_sent = (1, 0)  # as if something had been sent before
            with pytest.raises(BrokerError, match="waiting for the writer failed: Redis"):
                client.flush(0.3)
        finally:
            aof_redis.start()
        client.append("s1", "user", "back")  # the same client works again
    assert inbox_length(config) == 1


def inbox_length(config: Config) -> int:
    return inbox_entries(redis.Redis.from_url(config.redis_url))


def _restart_later(server: RedisServer, after_s: float) -> threading.Thread:
    thread = threading.Thread(target=lambda: (time.sleep(after_s), server.start()))
    thread.start()
    return thread
