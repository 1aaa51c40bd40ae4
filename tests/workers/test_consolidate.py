"""Consolidation end to end: real Redis, the real writer, in-process and killed workers,
the periodic request through rq-scheduler, and ``memq consolidate``."""

from __future__ import annotations

import signal
import subprocess
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import apsw
import pytest
import redis
from rq.registry import StartedJobRegistry
from rq_scheduler import Scheduler

from memq import MemoryClient, names
from memq.cli import main
from memq.config import Config, ConsolidationConfig, LLMConfig
from memq.errors import ValidationError
from memq.jobs import JSONJob, queue
from memq.store import rebuild
from memq.testing import wait_committed
from memq.workers import consolidate as consolidate_module
from memq.workers import context
from memq.workers.queues import worker
from memq.workers.scheduler import JSONScheduler
from tests.conftest import ROOT, memq_command
from tests.workers.helpers import (
    ChatServer,
    append_turns,
    completion,
    request_pass,
    run_burst_worker,
)

pytestmark = pytest.mark.redis

CONVERSATION = [
    "I just got back from Porto, we stayed five nights near the Ribeira with Tomas.",
    "Lovely! Did you manage to visit the Livraria Lello this time, or was it too busy?",
    "We did, on Tuesday morning at 9am before the queues; it cost 10 euros each.",
    "Worth it. Are you still planning the marathon in Valencia on 1 December?",
    "Yes, I'm training four times a week, and my coach Ines set a target of 3:45.",
    "That's ambitious. How is the knee after the physio sessions in October?",
    "Much better, the physio said I can run 30 km long runs again from next week.",
    "Great. Let's plan the trip to Valencia together, my cousin Lucia lives there.",
]


@pytest.fixture
def config(config: Config) -> Config:
    return config.replace(consolidation=ConsolidationConfig(chunk_size=4, min_chunk_chars=200))


def query(config: Config, sql: str, *args: Any) -> list[tuple[Any, ...]]:
    conn = apsw.Connection(config.db_path, flags=apsw.SQLITE_OPEN_READONLY)
    return conn.execute(sql, args).fetchall()


def summaries(config: Config) -> list[tuple[str, str, str, float]]:
    return query(config, "SELECT id, session_id, content, importance FROM messages "
                         "WHERE role = 'system' ORDER BY session_id, created_at")


@pytest.mark.model
def test_old_messages_become_summaries_and_the_originals_stay(
    client: MemoryClient, config: Config
) -> None:
    first = append_turns(client, "trip", CONVERSATION)
    other = append_turns(client, "other", CONVERSATION[:4])
    recent = append_turns(client, "trip", CONVERSATION[:3],
                          start=datetime.now(UTC) - timedelta(hours=1))
    assert request_pass(client) == {"chunks": 3, "enqueued": 3}
    run_burst_worker(config)

    found = summaries(config)
    assert [(session, importance) for _, session, _, importance in found] == [
        ("other", 0.7), ("trip", 0.7), ("trip", 0.7)]
    sources = {sid: [r[0] for r in query(config, "SELECT source_id FROM summary_sources "
                                                 "WHERE summary_id = ? ORDER BY position", sid)]
               for sid, *_ in found}
    assert sorted(sources.values()) == sorted([first[:4], first[4:], other])
    for sid, _, content, _ in found:
        marks = ",".join("?" * len(sources[sid]))
        originals = query(config, f"SELECT content FROM messages WHERE id IN ({marks})",
                          *sources[sid])
        assert len(originals) == len(sources[sid])  # kept, never deleted
        assert len(content) < sum(len(row[0]) for row in originals)
        assert content.startswith(f"Summary of {len(originals)} messages from ")
    assert query(config, "SELECT count(*) FROM messages WHERE role != 'system'") == [(15,)]
    marked = {row[0] for row in query(config, "SELECT id FROM messages "
                                              "WHERE consolidated_at IS NOT NULL")}
    assert marked == {*first, *other}
    assert not marked & set(recent)

    assert request_pass(client) == {"chunks": 0, "enqueued": 0}  # a second pass: nothing new
    run_burst_worker(config)
    assert summaries(config) == found
    assert rebuild.check(config.db_path) == []


def write_toml(path: Path, llm: LLMConfig) -> Path:
    path.write_text(f'[llm]\nbase_url = "{llm.base_url}"\nmodel = "{llm.model}"\n'
                    f"timeout_s = {llm.timeout_s}\n")
    return path


@pytest.mark.faults
@pytest.mark.slow
def test_a_worker_killed_mid_job_leaves_nothing_half_done(
    client: MemoryClient, config: Config, tmp_path: Path
) -> None:
    append_turns(client, "trip", CONVERSATION[:4])
    with ChatServer() as server:
        server.hang()  # the model is "thinking" when the worker dies
        llm = LLMConfig(base_url=server.base_url, model="fast", timeout_s=60)
        toml = write_toml(tmp_path / "memq.toml", llm)
        assert request_pass(client) == {"chunks": 1, "enqueued": 1}
        with (tmp_path / "worker.log").open("wb") as log:
            proc = subprocess.Popen(
                memq_command("worker", "consolidate", "--config", str(toml), "--db",
                             config.db_path, "--redis-url", config.redis_url),
                stdout=log, stderr=log, cwd=ROOT)
        try:
            assert server.received.wait(60), (tmp_path / "worker.log").read_text()
        finally:
            proc.send_signal(signal.SIGKILL)
            proc.wait(30)
        wait_committed(client.redis)
        assert summaries(config) == []
        assert query(config, "SELECT count(*) FROM messages "
                             "WHERE consolidated_at IS NOT NULL") == [(0,)]

        # RQ's own maintenance marks the abandoned job failed once its heartbeat lapses
        # (a minute or so); run it as if that time had passed, then pass again.
        registry = StartedJobRegistry(names.QUEUE_CONSOLIDATE, connection=client.redis,
                                      job_class=JSONJob)
        registry.cleanup(timestamp=time.time() + 3600)
        server.reply = lambda body: completion("They talked about Porto and the marathon.")
        server.release()
        assert request_pass(client) == {"chunks": 1, "enqueued": 1}
        run_burst_worker(config.replace(llm=llm))
    [(_, _, content, _)] = summaries(config)
    assert content.endswith("They talked about Porto and the marathon.")
    assert query(config, "SELECT count(*) FROM messages WHERE consolidated_at IS NOT NULL") == [
        (4,)]
    assert rebuild.check(config.db_path) == []


def test_the_periodic_job_requests_a_pass_through_rq_scheduler(
    client: MemoryClient, config: Config
) -> None:
    append_turns(client, "trip", CONVERSATION[:4])
    scheduler = Scheduler(queue_name=names.QUEUE_CONSOLIDATE, connection=client.redis,
                          job_class=JSONJob)
    assert consolidate_module.register_periodic(scheduler, config) is True
    assert consolidate_module.register_periodic(scheduler, config) is False  # idempotent
    job = JSONJob.fetch(consolidate_module.PERIODIC_JOB_ID, connection=client.redis)
    assert job.meta["interval"] == 6 * 3600
    assert job.func_name == "memq.workers.consolidate.request_pass"

    scheduler.enqueue_jobs()  # what the scheduler loop does when the job is due
    connection = redis.Redis.from_url(config.redis_url)
    context.install(context.WorkerContext(config, connection))
    [pass_job] = queue(names.QUEUE_CONSOLIDATE, connection).jobs
    worker([names.QUEUE_CONSOLIDATE], connection).work(burst=True, with_scheduler=False)
    event_id = JSONJob.fetch(pass_job.id, connection=connection).return_value()["event_id"]
    from memq.store.dispatch.consolidation_jobs import wait_planned

    assert wait_planned(connection, event_id, 10) == {"chunks": 1, "enqueued": 1}
    assert pass_job.id in scheduler  # rescheduled for the next interval

    changed = config.replace(consolidation=ConsolidationConfig(interval_hours=1))
    assert consolidate_module.register_periodic(scheduler, changed) is True
    job = JSONJob.fetch(consolidate_module.PERIODIC_JOB_ID, connection=client.redis)
    assert job.meta["interval"] == 3600
    client.redis.delete(job.key)  # the job's data lost, its schedule entry left behind
    assert consolidate_module.register_periodic(scheduler, changed) is True


def test_the_scheduler_registers_the_periodic_pass_again_after_redis_lost_it(
    client: MemoryClient, config: Config
) -> None:
    scheduler = JSONScheduler(queue_name=names.QUEUE_TASKS, connection=client.redis)
    scheduler.registrations.append(
        lambda s: consolidate_module.register_periodic(s, config))
    scheduler.enqueue_jobs()  # a tick
    assert consolidate_module.PERIODIC_JOB_ID in scheduler
    client.redis.flushall()
    assert consolidate_module.PERIODIC_JOB_ID not in scheduler
    scheduler.enqueue_jobs()  # the next tick, without a restart
    assert consolidate_module.PERIODIC_JOB_ID in scheduler
    job = JSONJob.fetch(consolidate_module.PERIODIC_JOB_ID, connection=client.redis)
    assert job.meta["interval"] == 6 * 3600


def test_consolidate_now_from_the_command_line(
    client: MemoryClient, config: Config, capsys: pytest.CaptureFixture[str]
) -> None:
    append_turns(client, "trip", CONVERSATION[:4], start=datetime.now(UTC) - timedelta(hours=1))
    store = ["--db", config.db_path, "--redis-url", config.redis_url]
    assert main(["consolidate", "--now", "--wait", "10", *store]) == 0
    assert "planned 0 chunk(s)" in capsys.readouterr().out  # nothing is 24 h old
    assert main(["consolidate", "--now", "--min-age-hours", "0", "--session", "trip",
                 "--wait", "10", *store]) == 0
    out = capsys.readouterr().out
    assert "for session trip, messages older than 0 h" in out
    assert "planned 1 chunk(s) and enqueued 1 consolidate job(s)" in out


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["consolidate"], "the following arguments are required: --now"),
        (["consolidate", "--now", "--min-age-hours", "-1"], "a number of hours is from 0 to"),
        (["consolidate", "--now", "--min-age-hours", "soon"], "not a number of hours"),
    ],
)
def test_consolidate_usage_errors(
    argv: list[str], message: str, capsys: pytest.CaptureFixture[str]
) -> None:
    with pytest.raises(SystemExit) as exit_:
        main(argv)
    assert exit_.value.code == 2
    assert message in capsys.readouterr().err


def test_consolidate_without_redis_is_a_one_line_error(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    code = main(["consolidate", "--now", "--db", str(tmp_path / "m.db"),
                 "--redis-url", "redis://127.0.0.1:1/0"])
    assert code == 1
    err = capsys.readouterr().err
    assert err.startswith("memq: error: sending the consolidation request failed")
    assert len(err.strip().splitlines()) == 1


@pytest.mark.parametrize(
    ("messages", "error"),
    [
        ([], "non-empty list"),
        ([{"id": "m1", "role": "user", "content": "x"}], "exactly id, role, content"),
        ([{"id": "m1", "role": "robot", "content": "x", "created_at": "t"}], "wrong type or role"),
    ],
)
def test_a_malformed_job_is_refused(config: Config, messages: list[Any], error: str) -> None:
    context.install(context.WorkerContext(config, redis.Redis.from_url(config.redis_url)))
    with pytest.raises(ValidationError, match=error):
        consolidate_module.consolidate("s", messages)
