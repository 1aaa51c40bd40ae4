"""Migrations: recorded, ordered, each atomic with its record, listing is read-only."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import apsw
import pytest

from memq.errors import MigrationError
from memq.store import schema
from memq.store.connection import PAGE_SIZE, READ_MMAP_BYTES, open_connection


def tables(path: Path) -> set[str]:
    conn = open_connection(path, readonly=True)
    names = {r[0] for r in conn.execute("SELECT name FROM sqlite_master WHERE type = 'table'")}
    conn.close()
    return names


def test_fresh_database_gets_every_table(tmp_path: Path) -> None:
    path = tmp_path / "fresh.db"
    conn = open_connection(path)
    applied = schema.migrate(conn)
    assert sorted(applied) == sorted(m.name for m in schema.MIGRATIONS)
    assert schema.applied(conn) == sorted(applied)
    assert schema.pending(conn) == []
    assert {"events", "rejected_events", "schema_migrations", *schema.PROJECTION_TABLES} \
        <= tables(path)


def test_migrate_twice_is_a_no_op(tmp_path: Path) -> None:
    conn = open_connection(tmp_path / "m.db")
    schema.migrate(conn)
    assert schema.migrate(conn) == []


def test_listing_pending_writes_nothing(tmp_path: Path) -> None:
    path = tmp_path / "new.db"
    open_connection(path).close()
    conn = open_connection(path, readonly=True)
    assert sorted(m.name for m in schema.pending(conn)) \
        == sorted(m.name for m in schema.MIGRATIONS)
    conn.close()
    assert "schema_migrations" not in tables(path)


def test_migrations_through_the_appliers_run_last(tmp_path: Path) -> None:
    # They write projection rows with today's appliers, which expect today's schema.
    conn = open_connection(tmp_path / "m.db")
    applied = schema.migrate(conn)
    last = [m.name for m in schema.MIGRATIONS if m.last]
    assert last == ["0003_import_legacy_messages", "0009_import_legacy_tables"]
    assert applied[-len(last):] == last
    assert applied[:-len(last)] == [m.name for m in schema.MIGRATIONS if not m.last]


def test_connection_policy(tmp_path: Path) -> None:
    conn = open_connection(tmp_path / "p.db")
    assert conn.pragma("journal_mode") == "wal"
    assert conn.pragma("synchronous") == 2  # FULL
    assert conn.pragma("busy_timeout") == 5000
    reader = open_connection(tmp_path / "p.db", readonly=True)
    assert reader.pragma("query_only") == 1
    schema.migrate(conn)
    assert conn.pragma("page_size") == PAGE_SIZE


def test_readers_map_the_file_and_see_every_commit_as_it_grows(tmp_path: Path) -> None:
    """A reader reads the file through a mapping (store/connection.py), the writer not; a
    mapping made while the file was small still shows rows written after it grew, whether
    they sit in the WAL or were checkpointed into the file, and rows rewritten in place."""
    writer = open_connection(tmp_path / "g.db")
    writer.execute("CREATE TABLE t (n INTEGER PRIMARY KEY, body TEXT)")
    reader = open_connection(tmp_path / "g.db", readonly=True)
    assert reader.pragma("mmap_size") == READ_MMAP_BYTES
    assert writer.pragma("mmap_size") == 0
    assert reader.execute("SELECT count(*) FROM t").fetchall() == [(0,)]
    body = "x" * 5000
    for step in range(4):
        with writer:
            writer.executemany("INSERT INTO t (body) VALUES (?)", [(body,)] * 500)
            writer.execute("UPDATE t SET body = ? WHERE n = 1", (f"rewritten {step}",))
        if step % 2:
            writer.execute("PRAGMA wal_checkpoint(TRUNCATE)").fetchall()
        rows = reader.execute("SELECT count(*), sum(length(body)) FROM t").fetchall()
        assert rows == [(500 * (step + 1), 5000 * (500 * (step + 1) - 1) + 11)]
        assert reader.execute("SELECT body FROM t WHERE n = 1").fetchall() \
            == [(f"rewritten {step}",)]
    assert (tmp_path / "g.db").stat().st_size > 8 * 2**20  # grew well past the first map


def test_an_existing_database_keeps_its_page_size(tmp_path: Path) -> None:
    old = apsw.Connection(str(tmp_path / "old.db"))
    old.pragma("page_size", 4096)
    old.execute("CREATE TABLE t (x); INSERT INTO t VALUES ('kept')")
    old.close()
    conn = open_connection(tmp_path / "old.db")
    assert conn.pragma("page_size") == 4096
    assert conn.pragma("journal_mode") == "wal"
    assert conn.execute("SELECT x FROM t").fetchall() == [("kept",)]


def test_open_migrated_creates_the_database_whole_and_private(tmp_path: Path) -> None:
    path = tmp_path / "data" / "new.db"
    conn, applied = schema.open_migrated(path)
    conn.close()
    assert sorted(applied) == sorted(m.name for m in schema.MIGRATIONS)
    assert sorted(p.name for p in path.parent.iterdir()) == ["new.db"]  # nothing left aside
    assert path.stat().st_mode & 0o777 == 0o600
    reopened, applied = schema.open_migrated(path)
    assert applied == []
    assert reopened.pragma("journal_mode") == "wal"
    reopened.close()


def test_a_failed_creation_leaves_no_database(tmp_path: Path, monkeypatch: Any) -> None:
    def broken(cur: Any) -> None:
        cur.execute("CREATE TABLE messages (x)")  # already there: fails

    monkeypatch.setattr(schema, "MIGRATIONS", [*schema.MIGRATIONS,
                                               schema.Migration("9999_broken", broken)])
    path = tmp_path / "new.db"
    with pytest.raises(MigrationError, match="9999_broken"):
        schema.open_migrated(path)
    assert list(tmp_path.iterdir()) == []


def test_pending_migrations_apply_all_or_nothing(tmp_path: Path, monkeypatch: Any) -> None:
    conn = open_connection(tmp_path / "old.db")
    schema.migrate(conn, through="0006_embedding_backlog_index")
    monkeypatch.setattr(schema, "MIGRATIONS", [*schema.MIGRATIONS, schema.Migration(
        "9999_broken", lambda cur: cur.execute("CREATE TABLE events (x)"))])
    with pytest.raises(MigrationError, match="9999_broken"):
        schema.migrate(conn)
    # 0007 and later were applied inside the failed transaction: none of them stayed.
    assert schema.applied(conn)[-1] == "0006_embedding_backlog_index"
    assert not conn.execute("SELECT 1 FROM sqlite_master WHERE name = 'messages_fts'").fetchall()
    conn.close()


def test_migrate_through_stops_at_that_migration(tmp_path: Path) -> None:
    conn = open_connection(tmp_path / "m.db")
    assert schema.migrate(conn, through="0002_projections") == [
        "0001_event_log", "0001b_legacy_tables_aside", "0002_projections"]
    assert not schema.is_current(conn)
    schema.migrate(conn)
    assert schema.is_current(conn)
    conn.close()


def test_empty_database_has_the_current_schema_and_refuses_writes() -> None:
    conn = schema.empty_database()
    assert schema.is_current(conn)
    with pytest.raises(apsw.ReadOnlyError):
        conn.execute("INSERT INTO facts (category, key, value, source, created_at, updated_at) "
                     "VALUES ('c', 'k', 'v', 'agent', 't', 't')")
