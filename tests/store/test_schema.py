"""Migrations: recorded, ordered, each atomic with its record, listing is read-only."""

from __future__ import annotations

from pathlib import Path

from store import schema
from store.connection import open_connection


def tables(path: Path) -> set[str]:
    conn = open_connection(path, readonly=True)
    names = {r[0] for r in conn.execute("SELECT name FROM sqlite_master WHERE type = 'table'")}
    conn.close()
    return names


def test_fresh_database_gets_every_table(tmp_path: Path) -> None:
    path = tmp_path / "fresh.db"
    conn = open_connection(path)
    applied = schema.migrate(conn)
    assert applied == [m.name for m in schema.MIGRATIONS]
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
    assert [m.name for m in schema.pending(conn)] == [m.name for m in schema.MIGRATIONS]
    conn.close()
    assert "schema_migrations" not in tables(path)


def test_connection_policy(tmp_path: Path) -> None:
    conn = open_connection(tmp_path / "p.db")
    assert conn.pragma("journal_mode") == "wal"
    assert conn.pragma("synchronous") == 2  # FULL
    assert conn.pragma("busy_timeout") == 5000
    reader = open_connection(tmp_path / "p.db", readonly=True)
    assert reader.pragma("query_only") == 1
