"""The read-only pool never opens more than five connections and never writes."""

from __future__ import annotations

import threading
import time
from pathlib import Path

import pytest

from memq.errors import StoreError
from store import schema
from store.connection import open_connection
from store.reader import ReadPool


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
