"""Forged RQ jobs planted straight into Redis: a pickle is never unpickled, a function that is
not one of memq's jobs never runs, bad arguments are refused with a clear error, callbacks
and queue classes named in a job's hash are never imported; every forged job fails alone
and the real ``memq worker`` and ``memq scheduler`` go on to run the next good job.

Every payload points at ``tests/faults/canary.py``, which leaves a file behind if it is
imported or called at all; the canary directory must stay empty.
"""

from __future__ import annotations

import os
import pickle
import subprocess
import sys
import time
import zlib
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import orjson
import pytest
import redis
from rq.serializers import JSONSerializer

from memq import names
from memq.clock import now_rfc3339
from memq.jobs import DEFAULT_JOB_TIMEOUT_S, MAX_JOB_DATA_BYTES, JSONJob
from memq.testing import RedisServer
from memq.workers.consolidate import PERIODIC_JOB_ID
from tests.conftest import ROOT
from tests.faults import canary, figures
from tests.faults.procs import env

pytestmark = [pytest.mark.faults, pytest.mark.redis]

RUN_TASK = "memq.workers.tasks.run_task"
CANARY = "tests.faults.canary.called"


class SystemPickle:
    """Unpickling this runs a shell command that leaves a file in the canary directory."""

    def __init__(self, directory: Path) -> None:
        self.directory = directory

    def __reduce__(self) -> tuple[Any, tuple[str]]:
        return (os.system, (f"touch {self.directory / 'os-system'}",))


def task(**changes: Any) -> dict[str, Any]:
    base = {"task_id": "forged", "name": "forged", "prompt": "hello", "trusted": False,
            "oneshot": False, "paused": True, "scheduled_for": now_rfc3339()}
    return {**base, **changes}


def json_job(func: Any, args: list[Any] | None = None, kwargs: dict[str, Any] | None = None,
             instance: Any = None) -> bytes:
    return zlib.compress(orjson.dumps([func, instance, args or [], kwargs or {}]))


@dataclass(frozen=True)
class Forged:
    label: str
    fields: dict[str, Any]
    status: str
    """"failed" or "finished" once the worker has seen it."""
    fragment: str = ""
    """In the failure's text."""

    @property
    def id(self) -> str:
        return "forged-" + "".join(c if c.isalnum() else "-" for c in self.label)


def forged_jobs(canaries: Path) -> list[Forged]:
    evil = pickle.dumps((RUN_TASK, None, (), {"task": canary.Evil()}))
    system = pickle.dumps(SystemPickle(canaries))
    not_json = "its data is not a JSON job"
    good = json_job(RUN_TASK, kwargs={"task": task()})

    def refused(func: Any) -> str:
        return f"{func!r} is not a memq job"

    return [
        Forged("pickle, compressed", {"data": zlib.compress(evil)}, "failed", not_json),
        Forged("pickle, plain", {"data": evil}, "failed", not_json),
        Forged("pickle running a shell", {"data": zlib.compress(system)}, "failed", not_json),
        Forged("pickle protocol 0", {"data": pickle.dumps(canary.Evil(), protocol=0)}, "failed",
               not_json),
        Forged("pickle in meta", {"data": good, "meta": evil}, "finished"),
        Forged("pickle as the result", {"data": good, "result": evil}, "finished"),
        Forged("JSON of the wrong shape", {"data": zlib.compress(b'{"a": 1}')}, "failed",
               not_json),
        Forged("JSON nested 100000 deep", {"data": b"[" * 100_000 + b"]" * 100_000}, "failed",
               not_json),
        Forged("bytes that are neither zlib nor JSON", {"data": b"\x00\x01\x02garbage"},
               "failed", not_json),
        Forged("empty data", {"data": b""}, "failed", not_json),
        *[Forged(f"function {func}", {"data": json_job(func, ["touch /tmp/x"])}, "failed",
                 refused(func))
          for func in ("os.system", "builtins.eval", "subprocess.check_call", CANARY,
                       "memq.workers.tasks.load_handler", "memq.jobs.resolve",
                       "memq.cli.main", "memq.workers.tasks.run_task.__globals__")],
        Forged("function name an int", {"data": json_job(5)}, "failed", refused(5)),
        Forged("no function", {"data": json_job(None)}, "failed", refused(None)),
        Forged("a method", {"data": json_job(RUN_TASK, instance="obj")}, "failed",
               "memq jobs are functions, not methods of 'obj'"),
        Forged("no argument", {"data": json_job(RUN_TASK)}, "failed",
               f"{RUN_TASK} missing a required argument: 'task'"),
        Forged("an unexpected keyword", {"data": json_job(RUN_TASK, kwargs={
            "task": task(), "evil": 1})}, "failed", "got an unexpected keyword argument 'evil'"),
        Forged("too many arguments", {"data": json_job(RUN_TASK, ["a", "b"])}, "failed",
               "too many positional arguments"),
        Forged("task None", {"data": json_job(RUN_TASK, [None])}, "failed",
               "run_task needs a task object, got NoneType"),
        Forged("task a list", {"data": json_job(RUN_TASK, [[1]])}, "failed",
               "run_task needs a task object, got list"),
        Forged("task_id an int", {"data": json_job(RUN_TASK, [task(task_id=5)])}, "failed",
               "run_task: task.task_id must be str, got 5"),
        Forged("paused a string", {"data": json_job(RUN_TASK, [task(paused="no")])}, "failed",
               "run_task: task.paused must be bool, got 'no'"),
        Forged("scheduled_for garbage", {"data": json_job(RUN_TASK, [task(scheduled_for="now")])},
               "failed", "task.scheduled_for must be an RFC3339 string"),
        Forged("callbacks naming the canary", {
            "data": good, "success_callback_name": CANARY, "failure_callback_name": CANARY,
            "stopped_callback_name": CANARY}, "finished"),
        Forged("a failure callback naming the canary", {
            "data": json_job(RUN_TASK, [None]), "failure_callback_name": CANARY}, "failed",
            "run_task needs a task object"),
        Forged("a run of a task that does not exist", {"data": json_job(RUN_TASK, kwargs={
            "task": task(task_id="ghost", paused=False, trusted=True, prompt="curl x | sh")})},
            "failed", "the writer registered no run of this task"),
        Forged("data that inflates to 33 MB", {
            "data": zlib.compress(b"[" * (MAX_JOB_DATA_BYTES + 1), 9)}, "failed",
            f"its data inflates beyond {MAX_JOB_DATA_BYTES} bytes"),
        Forged("a timeout of -1 (no limit, to RQ)", {"data": good, "timeout": -1}, "finished"),
        Forged("a timeout that is not a number", {"data": good, "timeout": "soon"}, "finished"),
        Forged("a good job after all that", {"data": good}, "finished"),
    ]


def plant(broker: redis.Redis, job_id: str, fields: dict[str, Any], *,
          scheduled: bool = False) -> None:
    now = now_rfc3339()
    broker.hset(f"rq:job:{job_id}", mapping={
        "status": "scheduled" if scheduled else "queued", "origin": names.QUEUE_TASKS,
        "created_at": now, "enqueued_at": now, "description": "forged", "timeout": 60,
        **fields})
    if scheduled:
        broker.zadd("rq:scheduler:scheduled_jobs", {job_id: int(time.time()) - 1})
    else:
        broker.rpush(f"rq:queue:{names.QUEUE_TASKS}", job_id)
        broker.sadd("rq:queues", f"rq:queue:{names.QUEUE_TASKS}")


@dataclass
class Aftermath:
    broker: redis.Redis
    canaries: Path
    worker: subprocess.CompletedProcess[str]
    scheduler: subprocess.CompletedProcess[str]
    jobs: list[Forged]


def memq(*args: str, canaries: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "memq", *args], cwd=ROOT,
                          env={**env(), "MEMQ_TEST_CANARY_DIR": str(canaries)},
                          capture_output=True, text=True, timeout=120, check=False)


@pytest.fixture(scope="module")
def aftermath(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Aftermath]:
    directory = tmp_path_factory.mktemp("hostile-jobs")
    canaries = directory / "canaries"
    canaries.mkdir()
    server = RedisServer(directory)
    server.start()
    broker = redis.Redis.from_url(server.url)
    try:
        jobs = forged_jobs(canaries)
        scheduled = _plant_scheduled(broker, canaries)
        scheduler = memq("scheduler", "--burst", "--redis-url", server.url, canaries=canaries)
        for job in jobs:
            plant(broker, job.id, job.fields)
        worker = memq("worker", "tasks", "--burst", "--redis-url", server.url,
                      canaries=canaries)
        yield Aftermath(broker, canaries, worker, scheduler, jobs + scheduled)
    finally:
        server.stop()


def _plant_scheduled(broker: redis.Redis, canaries: Path) -> list[Forged]:
    """Jobs for rq-scheduler, which moves them onto the queue: they end as the worker says."""
    good = json_job(RUN_TASK, kwargs={"task": task()})
    jobs = [
        Forged("scheduled pickle", {"data": zlib.compress(pickle.dumps(canary.Evil()))},
               "dropped"),
        Forged("scheduled with a queue class to import", {
            "data": good, "meta": orjson.dumps({"queue_class_name": "tests.faults.canary.Queue"})},
            "finished"),
        Forged("scheduled and good", {"data": good}, "finished"),
    ]
    for job in jobs:
        plant(broker, job.id, job.fields, scheduled=True)
    return jobs


def test_the_worker_and_the_scheduler_went_through_everything(aftermath: Aftermath) -> None:
    assert aftermath.scheduler.returncode == 0, aftermath.scheduler.stderr[-3000:]
    assert aftermath.worker.returncode == 0, aftermath.worker.stderr[-3000:]
    assert aftermath.broker.llen(f"rq:queue:{names.QUEUE_TASKS}") == 0
    # Only the scheduler's own periodic consolidation pass is left scheduled.
    left = aftermath.broker.zrange("rq:scheduler:scheduled_jobs", 0, -1)
    assert [job_id.decode() for job_id in left] == [PERIODIC_JOB_ID]
    assert "dropped a scheduled job that is not JSON" in aftermath.scheduler.stderr


def test_nothing_forged_was_ever_imported_unpickled_or_called(aftermath: Aftermath) -> None:
    assert sorted(p.name for p in aftermath.canaries.iterdir()) == []


def _outcome(aftermath: Aftermath, job: Forged) -> tuple[str, str]:
    if job.status == "dropped":
        gone = not aftermath.broker.exists(f"rq:job:{job.id}") or not aftermath.broker.zscore(
            "rq:scheduler:scheduled_jobs", job.id)
        return ("dropped" if gone else "still scheduled"), ""
    fetched = JSONJob.fetch(job.id, connection=aftermath.broker, serializer=JSONSerializer)
    status = str(fetched.get_status().value)
    result = fetched.latest_result()
    return status, (result.exc_string or "") if result is not None else ""


JOB_LABELS = [f.label for f in forged_jobs(Path("/nonexistent"))] + [
    "scheduled pickle", "scheduled with a queue class to import", "scheduled and good"]


@pytest.mark.parametrize("label", JOB_LABELS)
def test_forged_job(label: str, aftermath: Aftermath) -> None:
    (job,) = [j for j in aftermath.jobs if j.label == label]
    status, failure = _outcome(aftermath, job)
    assert status == job.status, failure[-1500:]
    assert job.fragment in failure
    if job.status == "failed":
        assert "memq.errors.ValidationError" in failure or "RefusedJobData" in failure
    figures.add("bad_inputs")


@pytest.mark.parametrize("label", ["a timeout of -1 (no limit, to RQ)",
                                   "a timeout that is not a number"])
def test_a_forged_timeout_is_clamped(label: str, aftermath: Aftermath) -> None:
    (job,) = [j for j in aftermath.jobs if j.label == label]
    fetched = JSONJob.fetch(job.id, connection=aftermath.broker, serializer=JSONSerializer)
    assert fetched.timeout == DEFAULT_JOB_TIMEOUT_S  # RQ's default, not "no limit"
