"""``memq status``: a real backlog, a real failed job, and what it says when a part is down."""

from __future__ import annotations

import orjson
import pytest
import redis

from memq import names
from memq.cli import main
from memq.config import Config
from producers import MemoryClient
from tests.conftest import WriterThread, free_port
from workers.queues import queue, worker

pytestmark = pytest.mark.redis


def status(capsys, config: Config, *extra: str) -> tuple[int, str]:
    code = main(["status", "--db", config.db_path, "--redis-url", config.redis_url, *extra])
    return code, capsys.readouterr().out


def status_json(capsys, config: Config) -> tuple[int, dict]:
    code, out = status(capsys, config, "--json")
    return code, orjson.loads(out)


@pytest.fixture
def backlog(config: Config) -> Config:
    """A database with two committed messages, then five more sent while no writer runs."""
    running = WriterThread(config)
    running.start()
    with MemoryClient(config=config) as client:
        client.append("s1", "user", "hello")
        client.append("s2", "user", "   ")  # empty: never embedded
        client.flush()
    running.stop()
    with MemoryClient(config=config) as client:
        for i in range(5):
            client.append("s1", "user", f"waiting {i}")
    return config


def fail_one_job(config: Config) -> None:
    """A job the worker refuses (it names no memq function) ends in the failed registry."""
    connection = redis.Redis.from_url(config.redis_url)
    queue(names.QUEUE_CONSOLIDATE, connection).enqueue("os.getcwd", job_id="not-a-memq-job")
    worker([names.QUEUE_CONSOLIDATE], connection).work(burst=True)


def test_json_reflects_a_backlog_and_a_failed_job(backlog: Config, capsys) -> None:
    fail_one_job(backlog)
    code, report = status_json(capsys, backlog)
    assert code == 0
    assert report["inbox"] == {**report["inbox"], "length": 5, "lag": 5, "pending": 0,
                               "group_exists": True}
    assert report["inbox"]["oldest_age_s"] >= 0
    assert report["queues"][names.QUEUE_CONSOLIDATE]["failed"] == 1
    assert report["queues"][names.QUEUE_TASKS]["failed"] == 0
    db = report["database"]
    assert db["messages"]["total"] == 2
    assert db["messages"]["empty"] == 1
    assert db["sessions"] == 2
    assert db["events"] == 2
    assert db["rejected"] == 0
    assert db["size_bytes"] > 0
    assert report["writer"]["batches"] >= 1
    assert report["writer"]["events_applied"] == 2


def test_entries_read_but_not_committed_count_as_pending(backlog: Config, capsys) -> None:
    # What a writer that died in the middle of a batch leaves behind.
    connection = redis.Redis.from_url(backlog.redis_url)
    connection.xreadgroup(names.WRITER_GROUP, names.WRITER_CONSUMER,
                          {names.INBOX_STREAM: ">"}, count=2)
    _, report = status_json(capsys, backlog)
    assert (report["inbox"]["lag"], report["inbox"]["pending"]) == (3, 2)


def test_backlog_drains_once_a_writer_runs(backlog: Config, capsys) -> None:
    running = WriterThread(backlog)
    running.start()
    try:
        with MemoryClient(config=backlog) as client:
            client.append("s1", "user", "last")
            client.flush()
        _, report = status_json(capsys, backlog)
    finally:
        running.stop()
    assert report["inbox"]["length"] == 0
    assert report["database"]["messages"]["total"] == 8
    assert report["writer"]["alive"] is True


def test_table_is_readable(backlog: Config, capsys) -> None:
    fail_one_job(backlog)
    code, out = status(capsys, backlog)
    assert code == 0
    assert "inbox     5 entries: 5 unread, 0 being applied" in out
    row = next(line for line in out.splitlines() if line.startswith(names.QUEUE_CONSOLIDATE))
    assert row.split()[1:4] == ["0", "0", "1"]  # queued, started, failed
    assert "messages  2 in 2 sessions: 0 embedded, 1 pending, 0 failed, 1 empty" in out


def test_workers_are_listed(config: Config, capsys) -> None:
    connection = redis.Redis.from_url(config.redis_url)
    registered = worker([names.QUEUE_EMBED], connection, name="status-test-worker")
    registered.register_birth()
    try:
        code, report = status_json(capsys, config)
    finally:
        registered.register_death()
    assert [w["name"] for w in report["workers"]] == ["status-test-worker"]
    assert report["workers"][0]["queues"] == [names.QUEUE_EMBED]
    assert code == 1  # the database does not exist yet


def test_redis_down_still_shows_the_database_and_hides_the_password(
    backlog: Config, capsys
) -> None:
    down = backlog.replace(redis_url=f"redis://memq:s3cret@127.0.0.1:{free_port()}/0")
    code, out = status(capsys, down)
    assert code == 1
    assert "unreachable: reading the status failed at redis://memq:***@127.0.0.1" in out
    assert "messages  2 in 2 sessions" in out
    assert "s3cret" not in out
    code, report = status_json(capsys, down)
    assert report["redis"]["ok"] is False
    assert report["database"]["ok"] is True
    assert "s3cret" not in orjson.dumps(report).decode()


def test_missing_database_is_reported(config: Config, capsys) -> None:
    code, report = status_json(capsys, config)
    assert code == 1
    assert report["redis"]["ok"] is True
    assert report["database"]["ok"] is False
    assert "database not found" in report["database"]["error"]


def test_tasks_due_next_are_listed(backlog: Config, capsys) -> None:
    import apsw

    # Rows as the tasks projection keeps them; the events that make them are another issue's.
    conn = apsw.Connection(backlog.db_path)
    for i, due in enumerate(["2030-01-03T09:00:00Z", "2030-01-01T09:00:00Z", None]):
        conn.execute(
            """INSERT INTO scheduled_tasks (id, name, cron_expr, original_schedule, prompt,
                   source, next_run_at, created_at, updated_at)
               VALUES (?, ?, '0 9 * * *', 'daily at 9am', 'p', 'tool', ?, 'x', 'x')""",
            (f"t{i}", f"task-{i}", due))
    conn.close()
    _, report = status_json(capsys, backlog)
    assert [t["name"] for t in report["database"]["tasks_due"]] == ["task-1", "task-0"]
    _, out = status(capsys, backlog)
    assert "2030-01-01T09:00:00Z  task-1  (daily at 9am)" in out
