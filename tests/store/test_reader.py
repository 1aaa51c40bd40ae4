"""The read-only pool never opens more than five connections and never writes."""

from __future__ import annotations

import threading
import time
from pathlib import Path

import pytest

from memq.errors import StoreError
from memq.store import schema
from memq.store.connection import open_connection
from memq.store.read.pool import ReadPool


def database(tmp_path: Path) -> Path:
    path = tmp_path / "r.db"
    schema.migrate(open_connection(path))
    return path


def test_pool_is_bounded_to_five(tmp_path: Path) -> None:
    pool = ReadPool(database(tmp_path))
    barrier = threading.Barrier(12)
    peak = []

    def read() -> None:
        barrier.wait()
        with pool.connection() as conn:
            conn.execute("SELECT count(*) FROM messages").fetchall()
            peak.append(pool.opened)
            time.sleep(0.01)

    threads = [threading.Thread(target=read) for _ in range(12)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert pool.opened <= 5
    assert max(peak) <= 5


def test_pool_size_is_validated(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="between 1 and 5"):
        ReadPool(tmp_path / "x.db", size=6)


def test_readers_cannot_write(tmp_path: Path) -> None:
    pool = ReadPool(database(tmp_path))
    with pytest.raises(StoreError, match="read from"), pool.connection() as conn:
        conn.execute("DELETE FROM messages")


def test_missing_database_is_a_clear_error(tmp_path: Path) -> None:
    pool = ReadPool(tmp_path / "absent.db")
    with pytest.raises(StoreError, match="database not found"), pool.connection():
        pass


def test_a_missing_database_reads_as_empty_until_it_is_created(tmp_path: Path) -> None:
    path = tmp_path / "later.db"
    pool = ReadPool(path, empty_until_ready=True)
    with pool.connection() as conn:
        assert conn.execute("SELECT count(*) FROM messages").fetchall() == [(0,)]
    assert not pool.is_ready()
    assert not path.exists()  # reading created nothing
    writer, _ = schema.open_migrated(path)
    writer.execute("INSERT INTO facts (category, key, value, source, created_at, updated_at) "
                   "VALUES ('c', 'k', 'v', 'agent', 't', 't')")
    assert pool.is_ready()
    with pool.connection() as conn:
        assert conn.execute("SELECT value FROM facts").fetchall() == [("v",)]
    writer.close()


def test_an_older_schema_reads_as_empty_until_it_is_migrated(tmp_path: Path) -> None:
    path = tmp_path / "older.db"
    writer = open_connection(path)
    schema.migrate(writer, through="0006_embedding_backlog_index")
    # (A table no later migration rebuilds from the log, which this row is not in.)
    writer.execute("INSERT INTO terminal_allowed_prefixes (prefix, created_at) "
                   "VALUES ('git status', 't')")
    pool = ReadPool(path, empty_until_ready=True)
    with pool.connection() as conn:
        # What this code reads (the lexical index, say) is not there yet: nothing, no error.
        assert conn.execute("SELECT count(*) FROM messages_fts").fetchall() == [(0,)]
        assert conn.execute("SELECT count(*) FROM terminal_allowed_prefixes").fetchall() \
            == [(0,)]
    schema.migrate(writer)
    with pool.connection() as conn:
        assert conn.execute("SELECT prefix FROM terminal_allowed_prefixes").fetchall() \
            == [("git status",)]
    assert pool.opened == 1  # the connection that found the old schema was kept for later
    writer.close()


def test_a_file_that_is_not_a_database_is_still_an_error(tmp_path: Path) -> None:
    path = tmp_path / "junk.db"
    path.write_bytes(b"this is not sqlite" * 100)
    pool = ReadPool(path, empty_until_ready=True)
    with pytest.raises(StoreError, match="cannot open database"), pool.connection():
        pass
