"""Backups: online and consistent while the writer commits; copies checked before use."""

from __future__ import annotations

import os
from pathlib import Path

import apsw
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from memq import MemoryClient
from memq.config import Config
from memq.errors import StoreError, WriterAlreadyRunning
from memq.store import backup as copies
from memq.store import schema


def events(path: str | Path) -> list[int]:
    conn = apsw.Connection(str(path), flags=apsw.SQLITE_OPEN_READONLY)
    try:
        return [row[0] for row in conn.execute("SELECT seq FROM events ORDER BY seq")]
    finally:
        conn.close()


@pytest.mark.redis
def test_a_backup_is_one_snapshot_while_the_writer_commits(
    client: MemoryClient, config: Config, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    for i in range(300):
        client.append("s", "user", f"message {i} " + "x" * 400)
    client.flush()
    before = events(config.db_path)
    monkeypatch.setattr(copies, "STEP_PAGES", 4)  # many steps, a commit between each two
    steps: list[tuple[int, int]] = []

    def commit_between_steps(done: int, total: int) -> None:
        steps.append((done, total))
        client.append("s", "user", f"written during step {len(steps)}")
        client.flush()

    pages = copies.backup(config.db_path, tmp_path / "copy.db", commit_between_steps)
    assert len(steps) > 10
    # Never restarted: every step moved forward, and the copy is the snapshot it began on.
    assert [done for done, _ in steps] == sorted({done for done, _ in steps})
    assert steps[-1] == (pages, pages)
    assert events(tmp_path / "copy.db") == before
    assert len(events(config.db_path)) == len(before) + len(steps)
    assert copies.check_copy(tmp_path / "copy.db") == len(before)
    assert os.stat(tmp_path / "copy.db").st_mode & 0o777 == 0o600
    assert not (tmp_path / "copy.db-wal").exists()  # one self-contained file


def test_a_backup_never_replaces_a_file(tmp_path: Path) -> None:
    db = tmp_path / "memq.db"
    schema.open_migrated(db)[0].close()
    (tmp_path / "there.db").write_text("keep me")
    with pytest.raises(StoreError, match="already exists"):
        copies.backup(db, tmp_path / "there.db")
    assert (tmp_path / "there.db").read_text() == "keep me"
    with pytest.raises(StoreError, match="database not found"):
        copies.backup(tmp_path / "absent.db", tmp_path / "new.db")
    assert sorted(p.name for p in tmp_path.iterdir() if "partial" in p.name) == []


def test_install_refuses_an_existing_database_and_a_running_writer(tmp_path: Path) -> None:
    db = tmp_path / "memq.db"
    schema.open_migrated(db)[0].close()
    copy = tmp_path / "copy.db"
    copies.backup(db, copy)
    with pytest.raises(StoreError, match="already exists"):
        copies.install(copy, db)
    from memq.store.write.lock import WriterLock

    with WriterLock(db), pytest.raises(WriterAlreadyRunning, match="then restore"):
        copies.install(copy, db, force=True)
    kept = copies.install(copy, db, force=True)
    assert kept is not None
    assert (kept / "memq.db").is_file()
    assert copies.check_copy(db) == 0


@settings(max_examples=25, deadline=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(content=st.binary(max_size=4096))
def test_check_copy_refuses_what_is_not_an_intact_memq_database(
    tmp_path: Path, content: bytes
) -> None:
    path = tmp_path / "candidate.db"
    path.write_bytes(content)
    with pytest.raises(StoreError, match=r"candidate\.db|from-here"):
        copies.check_copy(path, name="from-here")


def test_check_copy_names_a_foreign_database(tmp_path: Path) -> None:
    path = tmp_path / "other.db"
    conn = apsw.Connection(str(path))
    conn.execute("CREATE TABLE t(x)")
    conn.close()
    with pytest.raises(StoreError, match="not memq's"):
        copies.check_copy(path)


def test_check_copy_finds_damage(tmp_path: Path) -> None:
    db = tmp_path / "memq.db"
    schema.open_migrated(db)[0].close()
    copy = tmp_path / "copy.db"
    copies.backup(db, copy)
    data = bytearray(copy.read_bytes())
    data[4096 * 2: 4096 * 4] = b"\xff" * 8192  # a few pages of garbage
    copy.write_bytes(bytes(data))
    with pytest.raises(StoreError):
        copies.check_copy(copy)


def test_a_backup_where_no_file_can_be_made_is_a_store_error(tmp_path: Path) -> None:
    """/proc takes no new file: the backup once ended in a FileNotFoundError's traceback."""
    db = tmp_path / "memq.db"
    schema.migrate(apsw.Connection(str(db)))
    with pytest.raises(StoreError, match=r"backup of .* to /proc/copy\.db failed"):
        copies.backup(db, "/proc/copy.db")


def test_a_backup_into_a_missing_directory_is_refused(tmp_path: Path) -> None:
    """A mistyped directory would otherwise be made, and the backup kept where nobody looks."""
    db = tmp_path / "memq.db"
    schema.migrate(apsw.Connection(str(db)))
    with pytest.raises(StoreError, match="is not a directory: create it first"):
        copies.backup(db, tmp_path / "no-such-dir" / "copy.db")
    assert not (tmp_path / "no-such-dir").exists()
