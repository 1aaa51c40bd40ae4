"""``memq status``: a real backlog, a real failed job, and what it says when a part is down."""

from __future__ import annotations

import re

import numpy as np
import orjson
import pytest
import redis

from memq import MemoryClient, names
from memq.cli import main
from memq.config import Config
from memq.jobs import queue
from memq.store import schema
from memq.testing import WriterThread, free_port
from memq.workers.queues import worker
from tests.embedding_events import send_embeddings

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
                          dict.fromkeys(names.INBOX_STREAMS, ">"), count=2)
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
    assert re.search(r"embedding behind: the oldest message waiting for a vector was "
                     r"committed \d+\.\d s ago \(add `memq worker embed` processes", out)


def test_the_oldest_message_waiting_for_a_vector_is_aged_until_it_has_one(
    backlog: Config, capsys
) -> None:
    _, report = status_json(capsys, backlog)
    age = report["database"]["messages"]["oldest_pending_age_s"]
    assert 0 <= age < 300
    with MemoryClient(config=backlog) as client, WriterThread(backlog):
        client.flush()
        (waiting,) = [m.id for m in client.history("s1") if m.content == "hello"]
        send_embeddings(client, [waiting], np.eye(1, 384, dtype=np.float32))
        pending = [m.id for m in client.history("s1") if m.content.startswith("waiting")]
        send_embeddings(client, pending, np.eye(len(pending), 384, dtype=np.float32))
    _, report = status_json(capsys, backlog)
    assert report["database"]["messages"]["pending"] == 0
    assert report["database"]["messages"]["oldest_pending_age_s"] is None
    _, out = status(capsys, backlog)
    assert "embedding behind" not in out


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


def test_the_model_files_are_checked_where_status_runs(
    backlog: Config, capsys, tmp_path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from tests.conftest import MODEL_DIR

    monkeypatch.setenv("MEMQ_EMBED_MODEL_DIR", str(MODEL_DIR))
    code, report = status_json(capsys, backlog)
    assert report["model"] == {"name": backlog.embed.model_name, "dir": str(MODEL_DIR),
                               "ok": True, "missing": []}
    empty = tmp_path / "no-model"
    empty.mkdir()
    (empty / "config.json").write_text("{}")
    monkeypatch.setenv("MEMQ_EMBED_MODEL_DIR", str(empty))
    code, out = status(capsys, backlog)
    assert code == 0  # a machine that only runs the writer needs no model
    assert (f"model     MISSING files in {empty}: model.onnx, tokenizer.json, "
            "special_tokens_map.json, tokenizer_config.json") in out
    assert f"`memq fetch-model --model-dir {empty}`" in out


def test_one_line_says_whether_roles_are_enforced(
    config: Config, capsys, tmp_path, role_urls
) -> None:
    from memq.authority import Role
    from memq.testing import RedisServer

    with RedisServer(tmp_path) as plain:
        _, out = status(capsys, config.replace(redis_url=plain.url))
        [line] = [line for line in out.splitlines() if line.startswith("trust")]
        assert line == ("trust     one trust domain: this Redis has no memq ACL users, so every "
                        "client acts as admin (`memq acl apply` creates them)")
    _, out = status(capsys, config.replace(redis_url=role_urls[Role.ADMIN]))
    [line] = [line for line in out.splitlines() if line.startswith("trust")]
    assert line == ("trust     roles enforced by the ACL users memq-admin, memq-agent, "
                    "memq-worker; this command runs as memq-admin; but the default user needs "
                    "no password, so whoever reaches Redis is admin")
    code, out = status(capsys, config.replace(redis_url=role_urls[Role.AGENT]))
    assert code == 1  # the status is the person's to read
    assert "          refused: reading the status: the Redis user of redis://memq-agent:***@" \
        in out


def test_status_says_whether_this_redis_belongs_to_this_database(
    config: Config, capsys, tmp_path
) -> None:
    code, out = status(capsys, config)  # nothing claimed yet, and no database
    assert "binding   no writer has claimed this Redis for a database yet" in out
    with WriterThread(config) as running:
        assert running.writer is not None
        mine = running.writer.claim.database_id
        code, out = status(capsys, config)
        assert f"binding   this Redis belongs to this database ({mine})" in out
        other = config.replace(db_path=str(tmp_path / "other.db"))
        schema.open_migrated(other.db_path)[0].close()
        code, out = status(capsys, other)
        assert code == 1
        assert f"binding   MISMATCH: this Redis belongs to database {mine}" in out
        code, report = status_json(capsys, other)
        assert report["binding"]["ok"] is False
        assert report["binding"]["redis_database_id"] == mine
        assert report["redis"]["belongs_to"]["database_id"] == mine


def test_the_exit_code_tells_a_missing_writer_apart(backlog: Config, capsys) -> None:
    """For scripts and probes: Redis and the database answer, nothing is committing."""
    redis.Redis.from_url(backlog.redis_url).delete(names.WRITER_HEARTBEAT_KEY)
    code, report = status_json(capsys, backlog)
    assert (code, report["writer"]["alive"]) == (3, False)
