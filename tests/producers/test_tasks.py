"""Scheduled tasks end to end: the client, the writer, the real rq-scheduler and a tasks worker.

"Due now" and "missed" tasks are made with a ``task.scheduled`` event created in the past
(as a producer whose message waited would make it): the writer computes their next run
from that moment, so they are due without any test waiting for a clock.
"""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import pytest
import redis

from memq import MemoryClient, Task, names
from memq.clock import now_utc, parse_rfc3339
from memq.config import Config, SchedulerConfig
from memq.cron import next_run
from memq.errors import NotFound, ScheduleError, ValidationError
from memq.events import EventType
from memq.testing import WriterThread
from tests.scheduled import (
    agent_inbox,
    due_daily,
    due_oneshot,
    event,
    eventually,
    push,
    run_scheduler,
    run_tasks_worker,
    scheduled_jobs,
    wait_committed,
)

pytestmark = pytest.mark.redis


@pytest.fixture
def broker(redis_url: str) -> redis.Redis:
    return redis.Redis.from_url(redis_url)


def jobs_of(broker: redis.Redis, task_id: str) -> list[str]:
    return [job for job in scheduled_jobs(broker) if task_id in job]


def one_job(broker: redis.Redis, task_id: str) -> str:
    return str(eventually(lambda: jobs_of(broker, task_id), f"a run of {task_id}")[0])


def fire_due(config: Config, broker: redis.Redis) -> int:
    """One scheduler pass and a burst worker; how many runs were moved to the queue."""
    moved = len(run_scheduler(broker))
    run_tasks_worker(config, broker)
    wait_committed(broker)
    return moved


def restart(writer: WriterThread, broker: redis.Redis) -> None:
    """Stop and start the writer; returns once its start-up reconcile is done."""
    writer.stop()
    writer.start()
    # the writer reconciles before its first batch, so once this no-op commits it is done
    push(broker, event(EventType.TASK_DELETED, {"task_id": "no-such-task"}))
    wait_committed(broker)


def committed_task(client: MemoryClient, task_id: str) -> Task | None:
    return next((t for t in client.tasks() if t.id == task_id), None)


# -- the client API ----------------------------------------------------------------------

def test_schedule_task_commits_the_task_and_registers_its_run(
    client: MemoryClient, broker: redis.Redis
) -> None:
    task_id = client.schedule_task("standup", "every weekday at 8:30am", "post the standup",
                                   trusted=True, tz="Europe/Berlin")
    client.flush()
    [task] = client.tasks()
    assert (task.id, task.name, task.schedule, task.cron_expr, task.prompt, task.source) == (
        task_id, "standup", "every weekday at 8:30am", "30 8 * * 1-5", "post the standup",
        "tool")
    assert (task.is_oneshot, task.is_paused, task.is_trusted, task.tz) == (
        False, False, True, "Europe/Berlin")
    expected = next_run("30 8 * * 1-5", after=parse_rfc3339(task.created_at),
                        tz="Europe/Berlin")
    assert parse_rfc3339(task.next_run_at or "") == expected
    assert one_job(broker, task_id) == names.task_job_id(task_id, int(expected.timestamp()))


@pytest.mark.remote_too
def test_a_one_time_schedule_makes_a_oneshot(client: MemoryClient) -> None:
    task_id = client.schedule_task("remind", "in 1 hour 30 minutes", "stretch")
    client.flush()
    task = client.task(task_id)
    assert task.is_oneshot
    delay = parse_rfc3339(task.next_run_at or "") - parse_rfc3339(task.created_at)
    assert delay == timedelta(hours=1, minutes=30)


def test_default_zone_comes_from_the_config(config: Config, writer: WriterThread) -> None:
    zoned = config.replace(scheduler=SchedulerConfig(tz="Asia/Kolkata"))
    with MemoryClient(config=zoned) as client:
        task_id = client.schedule_task("t", "daily at 9am", "p")
        client.flush()
        task = client.task(task_id)
    assert task.tz == "Asia/Kolkata"
    assert (task.next_run_at or "")[11:19] == "03:30:00"


def test_pause_resume_and_delete(client: MemoryClient, broker: redis.Redis) -> None:
    task_id = client.schedule_task("t", "every 5 minutes", "p")
    client.flush()
    one_job(broker, task_id)
    client.pause_task(task_id)
    client.flush()
    assert client.task(task_id).is_paused
    assert client.task(task_id).next_run_at is None
    eventually(lambda: not jobs_of(broker, task_id), "the paused task's run to go")
    client.resume_task(task_id)
    client.flush()
    resumed = client.task(task_id)
    assert not resumed.is_paused
    assert parse_rfc3339(resumed.next_run_at or "") > parse_rfc3339(resumed.updated_at)
    one_job(broker, task_id)
    client.delete_task(task_id)
    client.flush()
    assert client.tasks() == []
    eventually(lambda: not jobs_of(broker, task_id), "the deleted task's run to go")


@pytest.mark.parametrize("action", ["pause_task", "resume_task", "delete_task", "task"])
@pytest.mark.remote_too
def test_unknown_task_id_is_not_found(client: MemoryClient, action: str) -> None:
    with pytest.raises(NotFound, match=r"^no scheduled task 'nope'$"):
        getattr(client, action)("nope")


@pytest.mark.remote_too
def test_a_task_can_be_paused_right_after_it_is_scheduled(
    client: MemoryClient, writer: WriterThread
) -> None:
    writer.stop()  # nothing is committed until the end: every read below is this client's
    task_id = client.schedule_task("standup", "hourly", "post the summary")
    other = client.schedule_task("reminder", "in 2 hours", "check the deploy")
    scheduled = client.task(task_id)
    assert (scheduled.name, scheduled.is_paused, scheduled.cron_expr) == ("standup", False,
                                                                          "0 * * * *")
    assert scheduled.next_run_at is not None
    client.pause_task(task_id)
    assert client.task(task_id).is_paused
    assert client.task(task_id).next_run_at is None
    client.resume_task(task_id)
    client.pause_task(task_id)
    client.delete_task(other)
    with pytest.raises(NotFound):
        client.task(other)
    assert [t.id for t in client.tasks()] == [task_id]
    writer.start()
    client.flush()
    committed = client.task(task_id)
    assert committed.is_paused
    assert [t.id for t in client.tasks()] == [task_id]


def test_another_clients_uncommitted_task_is_not_found(
    client: MemoryClient, writer: WriterThread, config: Config
) -> None:
    writer.stop()
    with MemoryClient(config=config) as other:
        task_id = other.schedule_task("t", "hourly", "p")
    with pytest.raises(NotFound):
        client.pause_task(task_id)
    writer.start()
    client.flush()
    wait_committed(client.redis)
    client.pause_task(task_id)


BAD_CALLS: list[tuple[dict[str, Any], type[Exception], str]] = [
    ({"schedule": "whenever you like"}, ScheduleError,
     "cannot understand schedule 'whenever you like'; try e.g. 'every 15 minutes'"),
    ({"schedule": "daily at 9am", "oneshot": True}, ScheduleError,
     "oneshot=True needs a one-time schedule such as 'in 2 hours'"),
    ({"schedule": "61 * * * *"}, ScheduleError, "invalid minute field '61'"),
    ({"schedule": "every 90 minutes"}, ScheduleError, "N must be 1-59 minutes"),
    ({"schedule": "on March 5 2020 at 3pm"}, ScheduleError, "is in the past"),
    ({"tz": "Mars/Olympus"}, ScheduleError, "unknown time zone 'Mars/Olympus'"),
    ({"tz": ""}, ValidationError, "tz must not be empty"),
    ({"name": ""}, ValidationError, "name must not be empty"),
    ({"name": "x" * 201}, ValidationError, "name is 201 characters, over the 200 limit"),
    ({"name": 7}, ValidationError, "name must be a string, got int"),
    ({"prompt": "  "}, ValidationError, "prompt must not be empty"),
    ({"prompt": None}, ValidationError, "prompt must be a string, got NoneType"),
    ({"prompt": "x" * 70_000}, ValidationError, "over the 65536 byte limit"),
    ({"schedule": 5}, ValidationError, "schedule must be a string, got int"),
    ({"trusted": "yes"}, ValidationError, "trusted must be True or False, got 'yes'"),
    ({"oneshot": 1}, ValidationError, "oneshot must be True or False, got 1"),
]


@pytest.mark.parametrize(("changes", "error", "message"), BAD_CALLS)
def test_bad_schedule_task_calls_raise_and_send_nothing(
    client: MemoryClient, broker: redis.Redis, changes: dict[str, Any],
    error: type[Exception], message: str,
) -> None:
    args = {"name": "t", "schedule": "hourly", "prompt": "p", **changes}
    with pytest.raises(error) as caught:
        client.schedule_task(args.pop("name"), args.pop("schedule"), args.pop("prompt"), **args)
    assert message in str(caught.value)
    client.flush()
    assert client.tasks() == []
    assert broker.get(names.COMMITTED_KEY) is None  # nothing was ever sent


# -- end to end: rq-scheduler and a tasks worker ------------------------------------------

def test_a_due_task_fires_exactly_once(
    client: MemoryClient, broker: redis.Redis, config: Config, writer: WriterThread
) -> None:
    scheduled = due_daily(prompt="check the inbox", trusted=True)
    task_id = scheduled.payload["task_id"]
    push(broker, scheduled)
    wait_committed(broker)
    one_job(broker, task_id)
    assert fire_due(config, broker) == 1
    [entry] = agent_inbox(broker)
    assert (entry["task_id"], entry["session_id"], entry["prompt"], entry["trusted"]) == (
        task_id, f"scheduled_{task_id}", "check the inbox", "true")
    task = eventually(lambda: (t := committed_task(client, task_id)) and t.last_run_at and t,
                      "task.fired to be applied")
    assert task.last_run_at == entry["fired_at"]
    next_at = parse_rfc3339(task.next_run_at)
    assert next_at - parse_rfc3339(entry["scheduled_for"]) == timedelta(days=1)
    eventually(lambda: jobs_of(broker, task_id) == [
        names.task_job_id(task_id, int(next_at.timestamp()))], "the next run")
    # a restart (reconcile), another scheduler pass and worker: nothing fires again
    restart(writer, broker)
    assert fire_due(config, broker) == 0
    assert len(agent_inbox(broker)) == 1


def test_a_due_oneshot_fires_once_and_is_gone(
    client: MemoryClient, broker: redis.Redis, config: Config
) -> None:
    scheduled = due_oneshot(prompt="once")
    task_id = scheduled.payload["task_id"]
    push(broker, scheduled)
    wait_committed(broker)
    one_job(broker, task_id)
    assert fire_due(config, broker) == 1
    eventually(lambda: committed_task(client, task_id) is None, "the one-shot to be deleted")
    eventually(lambda: not jobs_of(broker, task_id), "no run left")
    assert fire_due(config, broker) == 0
    assert [e["prompt"] for e in agent_inbox(broker)] == ["once"]


def test_a_paused_task_does_not_fire(
    client: MemoryClient, broker: redis.Redis, config: Config
) -> None:
    scheduled = due_daily()
    task_id = scheduled.payload["task_id"]
    push(broker, scheduled)
    wait_committed(broker)
    one_job(broker, task_id)
    client.pause_task(task_id)
    client.flush()
    eventually(lambda: not jobs_of(broker, task_id), "the paused task's run to go")
    assert fire_due(config, broker) == 0
    assert agent_inbox(broker) == []
    assert client.task(task_id).last_run_at is None


def test_restart_with_an_empty_redis_restores_pending_runs(
    client: MemoryClient, broker: redis.Redis, writer: WriterThread
) -> None:
    ids = [client.schedule_task(f"t{i}", f"daily at {i + 1}am", "p") for i in range(3)]
    paused = client.schedule_task("paused", "hourly", "p")
    client.flush()
    client.pause_task(paused)
    client.flush()
    before = eventually(lambda: len(scheduled_jobs(broker)) == 3 and scheduled_jobs(broker),
                        "three runs")
    writer.stop()
    broker.flushall()
    writer.start()
    eventually(lambda: scheduled_jobs(broker) == before, "the runs to be restored")
    assert all(len(jobs_of(broker, task_id)) == 1 for task_id in ids)


def test_missed_runs_fire_once_after_a_restart(
    client: MemoryClient, broker: redis.Redis, config: Config, writer: WriterThread
) -> None:
    writer.stop()
    scheduled = due_daily(days_ago=3)  # four daily slots passed while everything was down
    task_id = scheduled.payload["task_id"]
    push(broker, scheduled)
    writer.start()
    wait_committed(broker)
    job = one_job(broker, task_id)
    assert int(job.rsplit("_", 1)[1]) < (now_utc() - timedelta(days=2)).timestamp()
    assert fire_due(config, broker) == 1
    task = eventually(lambda: (t := committed_task(client, task_id)) and t.last_run_at and t,
                      "task.fired to be applied")
    assert parse_rfc3339(task.next_run_at) > now_utc()
    restart(writer, broker)
    assert fire_due(config, broker) == 0
    assert len(agent_inbox(broker)) == 1
