"""The scheduled_tasks projection, its pending runs in rq-scheduler, and config tasks.

The writer is driven one batch at a time (``step``), so every after-commit hook has run
when a test looks at Redis.
"""

from __future__ import annotations

from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
import redis
from rq.job import Job

from memq import names
from memq.clock import now_utc, to_rfc3339
from memq.config import Config, SchedulerConfig, WriterConfig
from memq.errors import ConfigError
from memq.events import EventType
from memq.jobs import JSONJob
from memq.store import rebuild
from memq.store.write.config_tasks import config_task_id, sync_config_tasks
from memq.store.write.service import open_writer
from memq.store.write.writer import Writer
from tests.scheduled import (
    SCHEDULED_JOBS,
    event,
    job_data,
    push,
    run_scheduler,
    scheduled_jobs,
    task_payload,
)

pytestmark = pytest.mark.redis

NY = "America/New_York"
T0 = datetime(2026, 3, 7, 12, 0, tzinfo=UTC)  # a Saturday; US clocks spring forward next day


def at(minutes: float, base: datetime = T0) -> datetime:
    return base + timedelta(minutes=minutes)


def stamp(moment: datetime) -> str:
    return to_rfc3339(moment)


@pytest.fixture
def fast_config(config: Config) -> Config:
    return config.replace(writer=WriterConfig(block_ms=1))


@pytest.fixture
def broker(redis_url: str) -> redis.Redis:
    return redis.Redis.from_url(redis_url)


def start(config: Config) -> Writer:
    writer = open_writer(config, redis.Redis.from_url(config.redis_url))
    writer.inbox.ensure_group()
    writer.reconcile()  # what run() does first
    return writer


@pytest.fixture
def store(fast_config: Config) -> Iterator[Writer]:
    writer = start(fast_config)
    yield writer
    writer.close()


def apply(writer: Writer, *events: Any) -> None:
    push(writer.redis, *events)
    while writer.step().size:
        pass


def row(writer: Writer, task_id: str) -> dict[str, Any] | None:
    cur = writer.conn.execute("SELECT * FROM scheduled_tasks WHERE id = ?", (task_id,))
    found = cur.fetchone()
    if found is None:
        return None
    return dict(zip([d[0] for d in cur.getdescription()], found, strict=True))


def rejected(writer: Writer) -> list[str]:
    return [r[0] for r in writer.conn.execute("SELECT reason FROM rejected_events ORDER BY id")]


def schedule(writer: Writer, when: datetime = T0, **fields: Any) -> str:
    payload = task_payload(**fields)
    apply(writer, event(EventType.TASK_SCHEDULED, payload, when))
    return str(payload["task_id"])


def change(writer: Writer, task_id: str, when: datetime, **fields: Any) -> None:
    apply(writer, event(EventType.TASK_CHANGED, {"task_id": task_id, **fields}, when))


def fire(writer: Writer, task_id: str, fired_at: datetime,
         scheduled_for: datetime | None = None) -> None:
    payload = {"task_id": task_id, "fired_at": stamp(fired_at)}
    if scheduled_for is not None:
        payload["scheduled_for"] = stamp(scheduled_for)
    apply(writer, event(EventType.TASK_FIRED, payload, fired_at))


# -- the projection ------------------------------------------------------------------

def test_recurring_task_runs_next_at_first_slot_after_created_at(store: Writer) -> None:
    task_id = schedule(store, name="standup", schedule="weekdays at 9am", cron_expr="0 9 * * 1-5",
                       prompt="post the standup", trusted=True, tz=NY)
    got = row(store, task_id)
    assert got == {
        "id": task_id, "name": "standup", "cron_expr": "0 9 * * 1-5",
        "original_schedule": "weekdays at 9am", "prompt": "post the standup",
        "source": "tool", "is_oneshot": 0, "is_paused": 0, "is_trusted": 1, "tz": NY,
        # Saturday -> Monday 9:00 in New York, which is EDT (UTC-4) after the change
        "next_run_at": "2026-03-09T13:00:00.000000Z", "last_run_at": None,
        "created_at": stamp(T0), "updated_at": stamp(T0),
    }


def test_dst_skipped_time_runs_once_moved_forward(store: Writer) -> None:
    task_id = schedule(store, cron_expr="30 2 * * *", tz=NY)
    assert row(store, task_id)["next_run_at"] == "2026-03-08T07:30:00.000000Z"  # 03:30 EDT


def test_oneshot_runs_at_run_at_even_when_past(store: Writer) -> None:
    run_at = at(-5)
    task_id = schedule(store, schedule="today at 11:55am", cron_expr="55 11 7 3 *",
                       oneshot=True, run_at=stamp(run_at))
    assert row(store, task_id)["next_run_at"] == stamp(run_at)
    assert row(store, task_id)["is_oneshot"] == 1


def test_pause_clears_next_run_and_resume_counts_from_resume(store: Writer) -> None:
    task_id = schedule(store, cron_expr="0 * * * *")
    change(store, task_id, at(10), paused=True)
    paused = row(store, task_id)
    assert (paused["is_paused"], paused["next_run_at"]) == (1, None)
    change(store, task_id, at(190), paused=False)  # 15:10
    resumed = row(store, task_id)
    assert (resumed["is_paused"], resumed["next_run_at"]) == (0, stamp(at(240)))
    assert resumed["updated_at"] == stamp(at(190))


def test_resume_of_an_active_task_keeps_its_next_run(store: Writer) -> None:
    task_id = schedule(store, cron_expr="0 * * * *")
    change(store, task_id, at(150), paused=False)
    assert row(store, task_id)["next_run_at"] == stamp(at(60))


def test_paused_oneshot_keeps_its_instant(store: Writer) -> None:
    run_at = at(120)
    task_id = schedule(store, oneshot=True, cron_expr="0 14 7 3 *", run_at=stamp(run_at))
    change(store, task_id, at(1), paused=True)
    assert row(store, task_id)["next_run_at"] == stamp(run_at)
    change(store, task_id, at(2), paused=False)
    assert row(store, task_id)["next_run_at"] == stamp(run_at)


def test_new_cron_recomputes_next_run_but_new_prompt_does_not(store: Writer) -> None:
    task_id = schedule(store, cron_expr="0 * * * *")
    change(store, task_id, at(5), prompt="new words")
    assert (row(store, task_id)["prompt"], row(store, task_id)["next_run_at"]) == (
        "new words", stamp(at(60)))
    change(store, task_id, at(6), cron_expr="*/15 * * * *", schedule="every 15 minutes")
    assert row(store, task_id)["next_run_at"] == stamp(at(15))
    assert row(store, task_id)["original_schedule"] == "every 15 minutes"


def test_fired_sets_last_run_and_next_slot(store: Writer) -> None:
    task_id = schedule(store, cron_expr="0 * * * *")
    fire(store, task_id, at(60, T0) + timedelta(seconds=2), scheduled_for=at(60))
    got = row(store, task_id)
    assert got["last_run_at"] == stamp(at(60) + timedelta(seconds=2))
    assert got["next_run_at"] == stamp(at(120))


def test_a_worker_clock_behind_cannot_fire_a_slot_twice(store: Writer) -> None:
    task_id = schedule(store, cron_expr="0 * * * *")
    fire(store, task_id, at(60) - timedelta(seconds=1), scheduled_for=at(60))
    assert row(store, task_id)["next_run_at"] == stamp(at(120))


def test_missed_runs_fire_once_and_continue_from_the_fire(store: Writer) -> None:
    task_id = schedule(store, cron_expr="*/5 * * * *")  # due 12:05, then down for hours
    fire(store, task_id, at(5 * 60 + 7), scheduled_for=at(5))  # fired once at 17:07
    assert row(store, task_id)["next_run_at"] == stamp(at(5 * 60 + 10))


def test_oneshot_is_deleted_after_firing(store: Writer) -> None:
    task_id = schedule(store, oneshot=True, cron_expr="5 12 7 3 *", run_at=stamp(at(5)))
    fire(store, task_id, at(5), scheduled_for=at(5))
    assert row(store, task_id) is None
    assert rejected(store) == []


def test_fire_or_delete_of_a_gone_task_changes_nothing(store: Writer) -> None:
    task_id = schedule(store)
    apply(store, event(EventType.TASK_DELETED, {"task_id": task_id}, at(1)))
    assert row(store, task_id) is None
    fire(store, task_id, at(2))
    apply(store, event(EventType.TASK_DELETED, {"task_id": task_id}, at(3)))
    assert row(store, task_id) is None
    assert rejected(store) == []
    assert store.conn.execute("SELECT count(*) FROM events").fetchone()[0] == 4


BAD_EVENTS = {
    "bad task id": (EventType.TASK_SCHEDULED, task_payload("a b"), "task_id must be 1-100"),
    "bad cron": (EventType.TASK_SCHEDULED, task_payload(cron_expr="61 * * * *"),
                 "invalid minute field '61'"),
    "bad tz": (EventType.TASK_SCHEDULED, task_payload(tz="Mars/Olympus"),
               "unknown time zone 'Mars/Olympus'"),
    "oneshot without run_at": (EventType.TASK_SCHEDULED, task_payload(oneshot=True),
                               "a one-shot task needs run_at"),
    "empty name": (EventType.TASK_SCHEDULED, task_payload(name=" "),
                   "payload.name must not be empty"),
    "empty prompt": (EventType.TASK_SCHEDULED, task_payload(prompt=""),
                     "task prompt must not be empty"),
    "bad source": (EventType.TASK_SCHEDULED, task_payload(source="cron"),
                   "payload.source must be one of config, tool"),
    "bad run_at": (EventType.TASK_SCHEDULED, task_payload(run_at="tomorrow"),
                   "payload.run_at must be an RFC3339 string"),
    "change of unknown task": (EventType.TASK_CHANGED, {"task_id": "nope", "paused": True},
                               "unknown task nope"),
    "bad fired_at": (EventType.TASK_FIRED, {"task_id": "x", "fired_at": "2026-01-01"},
                     "fired_at has no time zone offset"),
}


@pytest.mark.parametrize("name", sorted(BAD_EVENTS))
def test_bad_task_events_are_set_aside_with_reason(name: str, store: Writer) -> None:
    etype, payload, reason = BAD_EVENTS[name]
    apply(store, event(etype, payload, T0))
    reasons = rejected(store)
    assert len(reasons) == 1
    assert reason in reasons[0]
    assert store.conn.execute("SELECT count(*) FROM scheduled_tasks").fetchone()[0] == 0


def test_same_task_id_twice_is_refused(store: Writer) -> None:
    task_id = schedule(store)
    schedule(store, task_id=task_id, name="other")
    assert rejected(store) == [f"task {task_id} already exists"]
    assert row(store, task_id)["name"] == "t"


def test_bad_change_is_refused_and_keeps_the_task(store: Writer) -> None:
    task_id = schedule(store)
    change(store, task_id, at(1), oneshot=True)
    change(store, task_id, at(2), cron_expr="* * * *")
    reasons = rejected(store)
    assert "a one-shot task needs run_at" in reasons[0]
    assert "has 4 fields, expected 5" in reasons[1]
    assert row(store, task_id)["cron_expr"] == "* * * * *"


def test_rebuild_gives_the_same_rows(fast_config: Config) -> None:
    store = start(fast_config)
    a = schedule(store, cron_expr="0 9 * * 1-5", tz=NY)
    b = schedule(store, cron_expr="*/5 * * * *")
    c = schedule(store, oneshot=True, cron_expr="0 13 7 3 *", run_at=stamp(at(60)))
    d = schedule(store)
    change(store, a, at(1), paused=True)
    change(store, a, at(30), paused=False)
    fire(store, b, at(5, T0) + timedelta(seconds=1), scheduled_for=at(5))
    fire(store, c, at(60))
    change(store, b, at(7), cron_expr="0 * * * *", prompt="hourly now")
    apply(store, event(EventType.TASK_DELETED, {"task_id": d}, at(8)))
    before = store.conn.execute("SELECT * FROM scheduled_tasks ORDER BY id").fetchall()
    assert len(before) == 2
    assert rebuild.check(fast_config.db_path) == []
    store.close()
    rebuild.rebuild(fast_config.db_path)
    again = start(fast_config)
    try:
        assert again.conn.execute("SELECT * FROM scheduled_tasks ORDER BY id").fetchall() == before
    finally:
        again.close()


# -- pending runs in rq-scheduler ---------------------------------------------------------

def only_job(broker: redis.Redis, task_id: str) -> tuple[str, float]:
    jobs = {j: s for j, s in scheduled_jobs(broker).items() if task_id in j}
    assert len(jobs) == 1, jobs
    return next(iter(jobs.items()))


def test_a_new_task_gets_one_json_job_at_its_next_run(store: Writer, broker: redis.Redis) -> None:
    task_id = schedule(store, now_utc(), cron_expr="0 9 * * *", prompt="hi", trusted=True)
    next_run = datetime.fromisoformat(row(store, task_id)["next_run_at"])
    slot = int(next_run.timestamp())
    job_id, score = only_job(broker, task_id)
    assert (job_id, score) == (names.task_job_id(task_id, slot), slot)
    assert job_data(broker, job_id) == [
        "memq.workers.tasks.run_task", None, [],
        {"task": {"task_id": task_id, "name": "t", "prompt": "hi", "trusted": True,
                  "oneshot": False, "paused": False,
                  "scheduled_for": row(store, task_id)["next_run_at"]}},
    ]
    job = JSONJob.fetch(job_id, connection=broker)
    assert (job.origin, job.get_status()) == (names.QUEUE_TASKS, "scheduled")


def test_changes_replace_pause_and_delete_remove_the_run(
    store: Writer, broker: redis.Redis
) -> None:
    now = now_utc()
    task_id = schedule(store, now, cron_expr="0 9 * * *")
    first, _ = only_job(broker, task_id)
    change(store, task_id, now, cron_expr="0 10 * * *")
    second, _ = only_job(broker, task_id)
    assert second != first
    assert not broker.exists(Job.key_for(first))
    change(store, task_id, now, prompt="changed words")
    assert job_data(broker, only_job(broker, task_id)[0])[3]["task"]["prompt"] == "changed words"
    change(store, task_id, now, paused=True)
    assert scheduled_jobs(broker) == {}
    assert not broker.exists(Job.key_for(second))
    change(store, task_id, now, paused=False)
    only_job(broker, task_id)
    apply(store, event(EventType.TASK_DELETED, {"task_id": task_id}, now))
    assert scheduled_jobs(broker) == {}


def test_pausing_takes_an_already_queued_run_off_the_queue(
    store: Writer, broker: redis.Redis
) -> None:
    task_id = schedule(store, now_utc() - timedelta(minutes=2))
    job_id, _ = only_job(broker, task_id)
    run_scheduler(broker)
    queue_key = f"rq:queue:{names.QUEUE_TASKS}"
    assert broker.lrange(queue_key, 0, -1) == [job_id.encode()]
    assert job_data(broker, job_id)[0] == "memq.workers.tasks.run_task"  # still JSON once moved
    change(store, task_id, now_utc(), paused=True)
    assert broker.lrange(queue_key, 0, -1) == []
    assert not broker.exists(Job.key_for(job_id))


def test_reconcile_restores_runs_after_redis_loses_everything(
    store: Writer, broker: redis.Redis
) -> None:
    now = now_utc()
    active = [schedule(store, now, cron_expr=f"0 {h} * * *") for h in (1, 2, 3)]
    paused = schedule(store, now)
    change(store, paused, now, paused=True)
    before = scheduled_jobs(broker)
    assert len(before) == 3
    broker.flushall()
    store.reconcile()
    assert scheduled_jobs(broker) == before
    assert all(any(t in j for j in before) for t in active)


def test_reconcile_cancels_stray_runs_and_keeps_delivered_slots(
    store: Writer, broker: redis.Redis
) -> None:
    now = now_utc()
    task_id = schedule(store, now, cron_expr="0 9 * * *")
    job_id, score = only_job(broker, task_id)
    broker.zadd(SCHEDULED_JOBS, {names.task_job_id("gone-task", 1): 1})
    broker.zadd(SCHEDULED_JOBS, {names.task_job_id(task_id, 2): 2})
    store.reconcile()
    assert scheduled_jobs(broker) == {job_id: score}
    # a run already delivered (its task.fired on its way) is not scheduled again
    broker.flushall()
    broker.set(names.task_fired_key(task_id, int(score)), "x")
    store.reconcile()
    assert scheduled_jobs(broker) == {}



# -- config tasks ----------------------------------------------------------------------

def with_tasks(config: Config, *tasks: dict[str, Any], tz: str = "UTC") -> Config:
    return config.replace(scheduler=SchedulerConfig(tz=tz, tasks=tuple(tasks)))


def config_rows(writer: Writer) -> dict[str, tuple[Any, ...]]:
    return {r[0]: r[1:] for r in writer.conn.execute(
        """SELECT name, id, original_schedule, prompt, is_oneshot, is_trusted, tz, is_paused,
                  next_run_at FROM scheduled_tasks WHERE source = 'config'""")}


BACKUP = {"name": "backup", "schedule": "daily at 3am", "prompt": "run the backup"}
REPORT = {"name": "report", "schedule": "every monday at 9am", "prompt": "weekly report",
          "trusted": True, "tz": NY}


def test_config_tasks_are_added_updated_and_removed_by_name(fast_config: Config) -> None:
    writer = start(with_tasks(fast_config, BACKUP, REPORT, tz="Europe/Berlin"))
    tool_task = schedule(writer, T0)
    rows = config_rows(writer)
    assert rows["backup"][:6] == (config_task_id("backup"), "daily at 3am", "run the backup",
                                  0, 0, "Europe/Berlin")
    assert rows["report"][4:6] == (1, NY)
    writer.close()

    changed = {**BACKUP, "schedule": "daily at 4am"}
    writer = start(with_tasks(fast_config, changed, tz="Europe/Berlin"))
    rows = config_rows(writer)
    assert set(rows) == {"backup"}
    assert rows["backup"][:2] == (config_task_id("backup"), "daily at 4am")
    assert row(writer, tool_task) is not None  # tool tasks are never touched
    writer.close()

    writer = start(with_tasks(fast_config))
    assert config_rows(writer) == {}
    assert row(writer, tool_task) is not None
    assert rebuild.check(fast_config.db_path) == []
    writer.close()


def test_unchanged_config_makes_no_events_and_keeps_a_pause(fast_config: Config) -> None:
    config = with_tasks(fast_config, BACKUP)
    writer = start(config)
    change(writer, config_task_id("backup"), now_utc(), paused=True)
    count = writer.conn.execute("SELECT count(*) FROM events").fetchone()[0]
    assert sync_config_tasks(writer) == []
    assert writer.conn.execute("SELECT count(*) FROM events").fetchone()[0] == count
    writer.close()
    writer = start(with_tasks(fast_config, {**BACKUP, "prompt": "new"}))
    assert config_rows(writer)["backup"][2:] == ("new", 0, 0, "UTC", 1, None)
    writer.close()


def test_config_oneshot_is_parsed_once_and_not_re_added_after_firing(
    fast_config: Config,
) -> None:
    entry = {"name": "remind", "schedule": "in 2 hours", "prompt": "stretch"}
    config = with_tasks(fast_config, entry)
    writer = start(config)
    first = config_rows(writer)["remind"]
    assert first[3] == 1  # is_oneshot
    writer.close()
    writer = start(config)
    assert config_rows(writer)["remind"] == first  # not two hours from this start
    fire(writer, config_task_id("remind"), now_utc())
    assert config_rows(writer) == {}
    writer.close()
    writer = start(config)
    assert config_rows(writer) == {}
    writer.close()
    writer = start(with_tasks(fast_config, {**entry, "prompt": "stretch again"}))
    assert "remind" in config_rows(writer)  # an edited entry is a new one-shot
    writer.close()


@pytest.mark.parametrize(("entry", "message"), [
    ({**BACKUP, "schedule": "whenever"},
     "[[scheduler.tasks]] 'backup': cannot understand schedule 'whenever'"),
    ({**BACKUP, "oneshot": True},
     "[[scheduler.tasks]] 'backup': oneshot = true needs a one-time schedule"),
    ({**BACKUP, "schedule": "on March 5 2020 at 3pm"},
     "[[scheduler.tasks]] 'backup': 'on march 5 2020 at 3pm' is in the past"),
    ({**BACKUP, "name": "x" * 201}, "payload.name is 201 characters, over the 200 limit"),
    # was an OverflowError that stopped the writer at every start
    ({**BACKUP, "schedule": "in 99999999999999 minutes"},
     "[[scheduler.tasks]] 'backup': 'in 99999999999999 minutes' is beyond the year 9999"),
    ({**BACKUP, "schedule": "on 9999-12-31 at 11pm", "tz": "Etc/GMT+12"},
     "[[scheduler.tasks]] 'backup': 'on 9999-12-31 at 11pm' is beyond the year 9999"),
])
def test_bad_config_task_stops_the_writer_start(
    fast_config: Config, entry: dict[str, Any], message: str
) -> None:
    with pytest.raises(ConfigError) as caught:
        start(with_tasks(fast_config, entry))
    assert message in str(caught.value)
    # the lock was released: a corrected config starts
    start(with_tasks(fast_config, BACKUP)).close()


def test_config_sync_uses_the_configured_default_zone(fast_config: Config) -> None:
    config = with_tasks(fast_config, BACKUP, tz="Asia/Kolkata")
    writer = start(config)
    next_run = config_rows(writer)["backup"][-1]
    assert next_run.endswith("T21:30:00.000000Z")  # 03:00 IST
    writer.close()
