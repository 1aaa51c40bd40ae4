"""The WAL's checkpoints run on their own thread, never inside one of the writer's commits."""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

import apsw
import pytest

from memq.store.connection import PAGE_SIZE, open_connection
from memq.store.write.checkpoints import Checkpoints


@pytest.fixture
def writer(tmp_path: Path) -> Iterator[apsw.Connection]:
    conn = open_connection(tmp_path / "memq.db")
    conn.execute("CREATE TABLE t (x BLOB)")
    yield conn
    conn.close()


def commit_pages(conn: apsw.Connection, pages: int) -> None:
    """Commit about ``pages`` new pages, one transaction per 100."""
    for _ in range(pages // 100):
        with conn:
            conn.executemany("INSERT INTO t VALUES (randomblob(?))",
                             [(PAGE_SIZE - 200,)] * 100)


def wal_pages(conn: apsw.Connection) -> int:
    return os.path.getsize(f"{conn.filename}-wal") // PAGE_SIZE


def test_the_writers_commits_never_checkpoint(writer: apsw.Connection) -> None:
    checkpoints = Checkpoints(writer, pages=10**9)  # never due: nothing checkpoints
    try:
        commit_pages(writer, 2500)
        # SQLite's own checkpoint (every 1,000 pages) would have restarted the WAL.
        assert wal_pages(writer) > 2000
        assert checkpoints.runs == 0
    finally:
        checkpoints.close()


def test_the_thread_checkpoints_the_whole_wal_once_it_is_due(writer: apsw.Connection) -> None:
    checkpoints = Checkpoints(writer, pages=300)
    try:
        commit_pages(writer, 400)
        assert checkpoints.wait(1, timeout=30)
        log, done = checkpoints.last or (0, -1)
        assert log >= 300
        assert done == log  # no reader held the WAL: every page is in the file
    finally:
        checkpoints.close()


def test_after_close_the_writer_checkpoints_itself_again(writer: apsw.Connection) -> None:
    Checkpoints(writer, pages=10**9).close()
    commit_pages(writer, 2500)
    assert wal_pages(writer) < 1300


def test_a_reader_holding_the_wal_leaves_it_to_later_checkpoints(
        writer: apsw.Connection) -> None:
    commit_pages(writer, 200)  # before the thread: no checkpoint can be under way below
    checkpoints = Checkpoints(writer, pages=100)
    reader = open_connection(writer.filename, readonly=True)
    try:
        with reader:  # a snapshot from here on: the pages after it stay in the WAL
            reader.execute("SELECT count(*) FROM t").fetchall()
            commit_pages(writer, 200)
            assert checkpoints.wait(1, timeout=30)
            log, done = checkpoints.last or (0, 0)
            assert done < log
        runs = checkpoints.runs
        commit_pages(writer, 100)
        # A checkpoint begun while the reader held its snapshot may finish first; the one
        # this commit makes due comes after it and reaches the WAL's end.
        while True:
            runs += 1
            assert checkpoints.wait(runs, timeout=30)
            log, done = checkpoints.last or (0, -1)
            if done == log:
                break
    finally:
        reader.close()
        checkpoints.close()


def test_a_failed_checkpoint_is_logged_and_the_next_one_runs(
        writer: apsw.Connection, caplog: pytest.LogCaptureFixture,
        monkeypatch: pytest.MonkeyPatch) -> None:
    checkpoints = Checkpoints(writer, pages=100)
    calls = iter([apsw.IOError("disk I/O error")])
    real = checkpoints._conn

    class Failing:
        def wal_checkpoint(self, mode: int) -> tuple[int, int]:
            failure = next(calls, None)
            if failure is not None:
                raise failure
            return real.wal_checkpoint(mode=mode)

    monkeypatch.setattr(checkpoints, "_conn", Failing())
    try:
        commit_pages(writer, 200)
        commit_pages(writer, 100)
        assert checkpoints.wait(1, timeout=30)
        assert "a checkpoint of the WAL failed" in caplog.text
    finally:
        monkeypatch.setattr(checkpoints, "_conn", real)
        checkpoints.close()
