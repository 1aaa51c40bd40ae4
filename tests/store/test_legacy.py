"""Upgrading a legacy database: every column of every row survives, repeatably."""

from __future__ import annotations

import struct
from pathlib import Path

import apsw
import orjson
import pytest

from memq.errors import MigrationError
from store import rebuild, schema
from store.connection import open_connection
from store.legacy import legacy_event_id

LEGACY_SCHEMA = """
CREATE TABLE messages (
    id TEXT PRIMARY KEY, session_id TEXT NOT NULL, role TEXT NOT NULL, content TEXT NOT NULL,
    tool_call_id TEXT, tool_name TEXT, tool_calls_json TEXT, created_at TEXT NOT NULL,
    importance REAL DEFAULT 0.5, embedding BLOB, embedding_error TEXT, consolidated_at TEXT
);
CREATE INDEX idx_messages_session ON messages(session_id);
"""

COLUMNS = ("id, session_id, role, content, tool_call_id, tool_name, tool_calls_json, "
           "created_at, importance, embedding, embedding_error, consolidated_at")


def legacy_rows() -> list[tuple[object, ...]]:
    vector = [0.125, -0.5, 0.333333333333, 1e-7]
    return [
        ("a1", "s1", "user", "hello", None, None, None, "2024-01-01T10:00:00+00:00", 0.9,
         orjson.dumps(vector).decode(), None, None),
        ("a2", "s1", "assistant", "calling a tool", "call-1", None,
         '[{"id": "call-1", "function": {"name": "ls"}}]', "2024-01-01T10:00:01Z", 0.5,
         None, "model timeout", None),
        ("a3", "s1", "tool", "file.txt", "call-1", "ls", None, "2024-01-01T10:00:02.5Z", 0.3,
         struct.pack("<4f", 1.0, 0.0, 0.0, 0.0), None, "2024-01-02T00:00:00Z"),
        ("a4", "s2", "system", "", None, None, None, "2024-01-03T08:00:00+02:00", 0.1,
         None, None, "2024-01-04T00:00:00Z"),
    ]


def make_legacy(path: Path) -> None:
    conn = apsw.Connection(str(path))
    conn.execute(LEGACY_SCHEMA)
    conn.executemany(f"INSERT INTO messages ({COLUMNS}) VALUES ({', '.join('?' * 12)})",
                     legacy_rows())
    conn.close()


def test_upgrade_keeps_every_column_of_every_row(tmp_path: Path) -> None:
    path = tmp_path / "legacy.db"
    make_legacy(path)
    conn = open_connection(path)
    schema.migrate(conn)
    rows = conn.execute(f"SELECT {COLUMNS} FROM messages ORDER BY id").fetchall()
    assert rows == legacy_rows()
    # The legacy table is kept, renamed, untouched.
    assert conn.execute(f"SELECT {COLUMNS} FROM legacy_messages ORDER BY id").fetchall() \
        == legacy_rows()
    events = conn.execute("SELECT event_id, type FROM events ORDER BY seq").fetchall()
    assert events == [(legacy_event_id(r[0]), "message.imported") for r in legacy_rows()]
    conn.close()
    assert rebuild.check(path) == []


def test_upgrade_is_recorded_and_not_repeated(tmp_path: Path) -> None:
    path = tmp_path / "legacy.db"
    make_legacy(path)
    conn = open_connection(path)
    assert "0003_import_legacy_messages" in schema.migrate(conn)
    assert schema.migrate(conn) == []
    assert conn.execute("SELECT count(*) FROM events").fetchall() == [(4,)]


def test_interrupted_upgrade_rolls_back_and_can_be_repeated(tmp_path: Path) -> None:
    path = tmp_path / "legacy.db"
    make_legacy(path)
    bad = apsw.Connection(str(path))
    bad.execute("INSERT INTO messages (id, session_id, role, content, created_at) "
                "VALUES ('bad', 's', 'robot', 'x', '2024-01-01T00:00:00Z')")
    bad.close()
    conn = open_connection(path)
    with pytest.raises(MigrationError, match="legacy message bad cannot be imported"):
        schema.migrate(conn)
    # Nothing half-imported: the legacy rows are all there, no event was kept.
    assert conn.execute("SELECT count(*) FROM legacy_messages").fetchall() == [(5,)]
    assert conn.execute("SELECT count(*) FROM events").fetchall() == [(0,)]
    conn.execute("DELETE FROM legacy_messages WHERE id = 'bad'")
    schema.migrate(conn)
    assert conn.execute(f"SELECT {COLUMNS} FROM messages ORDER BY id").fetchall() \
        == legacy_rows()


def test_legacy_json_embedding_is_still_readable(tmp_path: Path) -> None:
    from store import vectors

    path = tmp_path / "legacy.db"
    make_legacy(path)
    conn = open_connection(path)
    schema.migrate(conn)
    (blob,) = conn.execute("SELECT embedding FROM messages WHERE id = 'a1'").fetchone()
    assert vectors.decode(blob).tolist() == pytest.approx([0.125, -0.5, 0.333333333333, 1e-7])
    dims = conn.execute("SELECT id, embedding_dim FROM messages ORDER BY id").fetchall()
    assert dims == [("a1", 4), ("a2", None), ("a3", 4), ("a4", None)]
