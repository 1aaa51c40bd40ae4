"""The inbox position each transaction records, the inbox kept by age, and a writer that
catches up from the position of a database restored from an older copy."""

from __future__ import annotations

import time
from pathlib import Path

import pytest
import redis

from memq import MemoryClient, names
from memq.config import Config, ReplicationConfig
from memq.inbox import committed_marks, stream_position
from memq.store import backup as copies
from memq.store import schema
from memq.store.read.pool import ReadPool
from memq.store.write import positions
from memq.store.write.service import open_writer
from memq.testing import WriterThread
from tests.scheduled import eventually

pytestmark = pytest.mark.redis


@pytest.fixture
def kept(config: Config) -> Config:
    """A configuration with a replica: acknowledged entries stay for a minute."""
    return config.replace(replication=ReplicationConfig(url="file:///nowhere",
                                                        keep_inbox_s=60.0))


def recorded(db_path: str) -> dict[str, tuple[int, int]]:
    conn, _ = schema.open_migrated(db_path)
    try:
        return positions.recorded(conn)
    finally:
        conn.close()


def contents(db_path: str, session: str) -> list[str]:
    pool = ReadPool(db_path)
    try:
        with pool.connection() as conn:
            rows = conn.execute("SELECT content FROM messages WHERE session_id = ?"
                                " ORDER BY created_at, rowid", (session,)).fetchall()
    finally:
        pool.close()
    return [row[0] for row in rows]


def test_each_commit_records_how_far_it_applied_each_stream(config: Config) -> None:
    with WriterThread(config), MemoryClient(config=config) as client:
        for i in range(5):
            client.append("s", "user", f"m{i}")
        client.flush()
        committed = committed_marks(redis.Redis.from_url(config.redis_url))
    assert recorded(config.db_path) == committed
    assert set(committed) == {names.ADMIN_INBOX_STREAM}  # the test Redis: one trust domain


def test_positions_never_move_back(tmp_path: Path) -> None:
    conn, _ = schema.open_migrated(tmp_path / "memq.db")
    cur = conn.cursor()
    positions.record(cur, [("a", "20-1"), ("a", "20-3"), ("b", "5-0")])
    positions.record(cur, [("a", "19-9"), ("b", "5-1")])
    assert positions.recorded(conn) == {"a": (20, 3), "b": (5, 1)}
    conn.close()


def test_without_a_replica_entries_go_when_acknowledged(config: Config) -> None:
    with WriterThread(config), MemoryClient(config=config) as client:
        client.append("s", "user", "hello")
        client.flush()
    assert redis.Redis.from_url(config.redis_url).xlen(names.ADMIN_INBOX_STREAM) == 0


def test_with_a_replica_entries_stay_for_the_window_then_go(
    kept: Config, monkeypatch: pytest.MonkeyPatch
) -> None:
    stream = names.ADMIN_INBOX_STREAM
    connection = redis.Redis.from_url(kept.redis_url)
    with WriterThread(kept) as running, MemoryClient(config=kept) as client:
        for i in range(5):
            client.append("s", "user", f"m{i}")
        client.flush()
        assert connection.xlen(stream) == 5
        writer = running.writer
        assert writer is not None
        # flush returns once Redis says committed; the writer's thread records its own
        # position just after that, and trim cuts at the position it has recorded.
        [(newest, _)] = connection.xrevrange(stream, count=1)
        eventually(lambda: writer.inbox.committed().get(stream) == stream_position(newest),
                   "the writer to record its commit")
        writer.inbox.trim()
        assert connection.xlen(stream) == 5  # still inside the window
        later = time.time() + 61
        monkeypatch.setattr("memq.store.write.inbox.time.time", lambda: later)
        writer.inbox.trim()
        # The last committed entry is the cut: it stays, everything older goes.
        assert connection.xlen(stream) == 1


def test_the_trim_never_drops_an_unacknowledged_entry(
    kept: Config, monkeypatch: pytest.MonkeyPatch
) -> None:
    stream = names.ADMIN_INBOX_STREAM
    connection = redis.Redis.from_url(kept.redis_url)
    with WriterThread(kept) as running, MemoryClient(config=kept) as client:
        client.append("s", "user", "committed")
        client.flush()
        writer = running.writer
        assert writer is not None
    # The writer is stopped: these wait, unread, older than the window once time moves.
    with MemoryClient(config=kept) as client:
        for i in range(3):
            client.append("s", "user", f"backlog {i}")
    later = time.time() + 3600
    monkeypatch.setattr("memq.store.write.inbox.time.time", lambda: later)
    writer.inbox.trim()
    assert connection.xlen(stream) == 4


def test_a_database_restored_from_an_older_copy_catches_up_exactly_once(
    kept: Config, tmp_path: Path
) -> None:
    copy = tmp_path / "older.db"
    with WriterThread(kept), MemoryClient(config=kept) as client:
        for i in range(20):
            client.append("s", "user", f"before {i}")
        client.flush()
        copies.backup(kept.db_path, copy)
        for i in range(30):
            client.append("s", "user", f"after {i}")
        client.flush()
    assert len(contents(kept.db_path, "s")) == 50
    copies.install(copy, kept.db_path, force=True)
    assert len(contents(kept.db_path, "s")) == 20  # the copy lacks what came after it
    with WriterThread(kept) as running, MemoryClient(config=kept) as client:
        client.append("s", "user", "new")
        client.flush()
        assert running.writer is not None
    expected = [f"before {i}" for i in range(20)] + [f"after {i}" for i in range(30)] + ["new"]
    assert contents(kept.db_path, "s") == expected


def test_catching_up_after_a_plain_restart_reads_nothing_again(kept: Config) -> None:
    with WriterThread(kept), MemoryClient(config=kept) as client:
        client.append("s", "user", "one")
        client.flush()
    writer = open_writer(kept, redis.Redis.from_url(kept.redis_url))
    try:
        writer.inbox.load_committed()
        assert writer.catch_up() == 0
    finally:
        writer.close()


def test_status_tells_kept_entries_from_a_backlog(kept: Config) -> None:
    from memq.store.read.status import inbox

    connection = redis.Redis.from_url(kept.redis_url)
    with WriterThread(kept), MemoryClient(config=kept) as client:
        for i in range(5):
            client.append("s", "user", f"m{i}")
        client.flush()
    report = inbox(connection)
    assert (report["length"], report["kept"], report["lag"], report["pending"]) == (5, 5, 0, 0)
    assert report["oldest_age_s"] is None  # nothing waits for the writer
    with MemoryClient(config=kept) as client:
        client.append("s", "user", "waiting")  # no writer runs now
    report = inbox(connection)
    assert (report["length"], report["kept"], report["lag"]) == (6, 5, 1)
    assert report["oldest_age_s"] is not None


def test_a_copy_older_than_the_kept_inbox_is_reported(
    kept: Config, tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
    caplog: pytest.LogCaptureFixture,
) -> None:
    copy = tmp_path / "older.db"
    with WriterThread(kept) as running, MemoryClient(config=kept) as client:
        client.append("s", "user", "in the copy")
        client.flush()
        copies.backup(kept.db_path, copy)
        for i in range(3):
            client.append("s", "user", f"not in the copy {i}")
        client.flush()
        writer = running.writer
        assert writer is not None
    # Trimmed once the writer's thread has stopped: a client's flush returns when the
    # commit is in Redis, a moment before the writer notes it, and trim reads that note.
    later = time.time() + 3600
    monkeypatch.setattr("memq.store.write.inbox.time.time", lambda: later)
    writer.inbox.trim()  # all but the last committed entry aged out
    copies.install(copy, kept.db_path, force=True)
    restarted = open_writer(kept, redis.Redis.from_url(kept.redis_url))
    try:
        restarted.inbox.load_committed()
        with caplog.at_level("ERROR", logger="memq.writer"):
            restarted.catch_up()
    finally:
        restarted.close()
    assert "older than what the inbox still holds" in caplog.text
    assert contents(kept.db_path, "s") == ["in the copy", "not in the copy 2"]
