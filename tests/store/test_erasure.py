"""After a forget: the RQ jobs that carry its text go, in a few round trips whatever their
data or their number, leaving no more of them in Redis than RQ's own ``Job.delete``; and a
forget while Litestream replicates (its read transaction keeps the WAL from
being truncated) finishes all the same, saying so, without stalling the writer."""

from __future__ import annotations

import subprocess
import time
from collections.abc import Callable
from datetime import timedelta
from pathlib import Path
from typing import Any

import orjson
import pytest
import redis
from rq import Queue, SimpleWorker
from rq.group import Group
from rq.job import Job
from rq.rate_limit import RateLimit
from rq.serializers import JSONSerializer

from memq import MemoryClient, jobs
from memq.config import Config, ReplicationConfig
from memq.store.dispatch.erasure import sweep_jobs
from memq.testing import WriterThread
from memq.workers.queues import LoggingWorker, StoppableQueue
from tests.conftest import ROOT, memq_command

pytestmark = pytest.mark.redis


def _enqueue(connection: redis.Redis, job_id: str, message_ids: list[str]) -> None:
    queue = jobs.queue("memq-embed", connection)
    queue.enqueue("memq.workers.embed.embed", kwargs={"texts": ["secret text"]},
                  job_id=job_id, meta={"message_ids": message_ids})


@pytest.mark.parametrize("with_bad_job", [False, True])
def test_every_job_naming_a_forgotten_message_goes(redis_url: str, with_bad_job: bool) -> None:
    connection = redis.Redis.from_url(redis_url)
    for i in range(30):
        _enqueue(connection, f"memq-embed-{i}", [f"gone-{i}"] if i % 3 else [f"kept-{i}"])
    if with_bad_job:  # jobs RQ cannot read back: they are left to RQ's delete, one by one
        connection.hset("rq:job:memq-embed-bad", mapping={
            "created_at": "not a date", "data": "x", "status": "queued",
            "meta": orjson.dumps({"message_ids": ["gone-bad"]})})
        connection.hset("rq:job:memq-embed-worse", mapping={
            "origin": b"\xff", "meta": orjson.dumps({"message_ids": ["gone-worse"]})})
    deleted = sweep_jobs(connection, lambda ids: any(i.startswith("gone-") for i in ids))
    assert deleted == 20 + 2 * with_bad_job
    left = sorted(k.decode() for k in connection.scan_iter(match="rq:job:*"))
    assert left == sorted(f"rq:job:memq-embed-{i}" for i in range(0, 30, 3))
    queued = {j.decode() for j in connection.lrange("rq:queue:memq-embed", 0, -1)}
    assert queued == {f"memq-embed-{i}" for i in range(0, 30, 3)}


class Counting(redis.Redis):
    """Counts round trips: each command sent alone, and each pipeline (sent once)."""

    trips = 0

    def execute_command(self, *args: Any, **options: Any) -> Any:
        self.trips += 1
        return super().execute_command(*args, **options)

    def pipeline(self, transaction: bool = True, shard_hint: Any = None) -> Any:
        self.trips += 1
        return super().pipeline(transaction, shard_hint)


def test_the_round_trips_do_not_grow_with_the_jobs(redis_url: str) -> None:
    connection = Counting.from_url(redis_url)
    trips = []
    for doomed in (3, 30):
        connection.flushall()
        for i in range(40):
            _enqueue(connection, f"memq-embed-{i}", [f"gone-{i}" if i < doomed else f"kept-{i}"])
        connection.trips = 0
        assert sweep_jobs(connection, lambda ids: any(i.startswith("gone-") for i in ids)) == doomed
        trips.append(connection.trips)
    # A SCAN for each pattern, the metas, then one read and one delete of the doomed jobs.
    assert trips == [5, 5]


# -- what is left of a job, in each state real RQ gives it -------------------------------

_QUEUE = "memq-embed"


def _rq_queue(connection: redis.Redis) -> Queue:
    return Queue(_QUEUE, connection=connection, serializer=JSONSerializer)


def _worker(connection: redis.Redis) -> SimpleWorker:
    # memq's: RQ's own may wait a minute in its command thread when it ends (workers/queues.py)
    queue = StoppableQueue(_QUEUE, connection=connection, serializer=JSONSerializer)
    return LoggingWorker([queue], connection=connection, serializer=JSONSerializer)


def _taken(connection: redis.Redis, job: Job) -> SimpleWorker:
    """A worker has moved ``job`` off its queue, as it does first of all (the next step
    records an execution)."""
    worker = _worker(connection)
    worker.register_birth()
    got = worker.dequeue_job_and_maintain_ttl(timeout=1)
    assert got is not None
    assert got[0].id == job.id
    return worker


def _started(connection: redis.Redis, job: Job) -> None:
    """RQ's own steps before a worker calls the job's function: an execution recorded (in
    the started registry and the worker's index), the job marked started."""
    worker = _taken(connection, job)
    worker.prepare_execution(job)
    worker.prepare_job_execution(job, remove_from_intermediate_queue=True)


def _make(connection: redis.Redis, state: str, owner: str) -> list[str]:
    """Jobs of ``owner`` (its meta names the message ``owner``) left in ``state``."""
    queue, jid = _rq_queue(connection), f"memq-embed-{owner}-{state}"
    meta = {"message_ids": [owner]}
    if state == "scheduled":
        queue.enqueue_in(timedelta(hours=1), "math.floor", 1.5, job_id=jid, meta=meta)
    elif state == "deferred":  # its parent goes too, or the parent's dependents name it
        parent = queue.enqueue("math.floor", 1.5, job_id=f"memq-embed-{owner}-parent", meta=meta)
        queue.enqueue("math.floor", 1.5, job_id=jid, meta=meta, depends_on=parent)
        return [parent.id, jid]
    elif state == "grouped":
        data = Queue.prepare_data("math.floor", (1.5,), job_id=jid, meta=meta)
        Group.create(connection).enqueue_many(queue, [data])
    elif state == "rate-limited":
        queue.enqueue("math.floor", 1.5, job_id=jid, meta=meta, rate_limit=RateLimit(owner, 1))
    else:
        _STEPS[state](connection, queue.enqueue(
            "math.sqrt" if state == "failed" else "math.floor", -1.5, job_id=jid, meta=meta))
    return [jid]


_STEPS: dict[str, Callable[[redis.Redis, Job], object]] = {
    "queued": lambda connection, job: None,
    "finished": lambda connection, job: _worker(connection).work(burst=True, with_scheduler=False),
    "failed": lambda connection, job: _worker(connection).work(burst=True, with_scheduler=False),
    "canceled": lambda connection, job: job.cancel(),
    "taken": _taken,
    "started": _started,
}


def _traces(connection: redis.Redis, job_ids: list[str]) -> list[str]:
    """Every key named after one of the jobs, and every member of a list, set or sorted
    set (queues, registries, indexes) that names one."""
    found = []
    for key in connection.scan_iter(count=1000):
        name = key.decode()
        kind = connection.type(key).decode()
        members: list[bytes] = (connection.lrange(key, 0, -1) if kind == "list"
                                else list(connection.smembers(key)) if kind == "set"
                                else connection.zrange(key, 0, -1) if kind == "zset" else [])
        for jid in job_ids:
            found += [name] if jid in name else []
            found += [f"{name} holds {m.decode()}" for m in members if jid in m.decode()]
    return sorted(set(found))


RQ_LEAVES = {"taken": ["rq:queue:memq-embed:intermediate holds memq-embed-rq-taken"]}
"""What RQ's own delete leaves: a job a worker has taken off the queue stays in the list it
was moved to, until that worker's next maintenance pass."""


@pytest.mark.parametrize("state", ["queued", "finished", "failed", "deferred", "scheduled",
                                   "canceled", "taken", "started", "grouped", "rate-limited"])
def test_a_swept_job_leaves_nothing_rqs_own_delete_would_not(redis_url: str, state: str) -> None:
    connection = redis.Redis.from_url(redis_url)
    made = {owner: _make(connection, state, owner) for owner in ("swept", "rq")}
    assert _traces(connection, made["swept"])  # the job is there, with its bookkeeping
    assert sweep_jobs(connection, lambda ids: ids == ["swept"]) == len(made["swept"])
    for jid in made["rq"]:
        Job.fetch(jid, connection=connection, serializer=JSONSerializer).delete()
    assert _traces(connection, made["swept"]) == []
    assert _traces(connection, made["rq"]) == RQ_LEAVES.get(state, [])


@pytest.mark.slow
def test_a_forget_finishes_while_litestream_holds_the_wal(config: Config, tmp_path: Path) -> None:
    replica = tmp_path / "replica"
    config = config.replace(replication=ReplicationConfig(url=replica.as_uri()))
    settings = tmp_path / "memq.toml"
    settings.write_text(f'[replication]\nurl = "{replica.as_uri()}"\n')
    with WriterThread(config), MemoryClient(config=config) as client:
        client.append("gone", "user", "forget me")
        client.flush()
        litestream = subprocess.Popen(
            memq_command("replicate", "--db", config.db_path, "--config", str(settings)),
            cwd=ROOT, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        try:
            while not any(replica.rglob("*.ltx")):  # Litestream holds its reader by now
                assert litestream.poll() is None, "litestream exited"
                time.sleep(0.05)
            outcomes = []
            for session in ("gone", "also-gone"):
                client.append(session, "user", "forget me too")
                client.flush()
                outcomes.append(client.wait_forgotten(client.forget_session(session)))
        finally:
            litestream.terminate()
            litestream.wait(30)
    assert [o["messages"] for o in outcomes] == [2, 1]
    assert [o["wal_truncated"] for o in outcomes] == [False, False]
