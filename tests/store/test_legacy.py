"""Upgrading a seed database: every row of its five tables survives, field by field, and
the upgrade can be interrupted and repeated."""

from __future__ import annotations

import os
import stat
import struct
import subprocess
import sys
from datetime import datetime
from pathlib import Path
from typing import Any

import apsw
import orjson
import pytest

from memq.clock import parse_rfc3339
from memq.errors import MigrationError
from memq.producers.terminal import is_command_allowed
from memq.store import rebuild, schema
from memq.store.connection import open_connection
from memq.store.legacy import legacy_event_id
from memq.store.read.facts import fact_history
from memq.store.read.prefixes import approved_prefixes
from tests.conftest import ROOT
from tests.faults.procs import env

SEED_SCHEMA = """
CREATE TABLE messages (
    id TEXT PRIMARY KEY, session_id TEXT NOT NULL, role TEXT NOT NULL, content TEXT NOT NULL,
    tool_call_id TEXT, tool_name TEXT, tool_calls_json TEXT, created_at TEXT NOT NULL,
    importance REAL DEFAULT 0.5, embedding BLOB, embedding_error TEXT, consolidated_at TEXT
);
CREATE INDEX idx_messages_session ON messages(session_id);
CREATE TABLE facts (
    id INTEGER PRIMARY KEY, category TEXT NOT NULL, key TEXT NOT NULL, value TEXT NOT NULL,
    source TEXT NOT NULL, created_at TEXT NOT NULL, updated_at TEXT NOT NULL,
    UNIQUE (category, key)
);
CREATE TABLE macros (
    id INTEGER PRIMARY KEY, trigger_tool TEXT NOT NULL, trigger_args_pattern TEXT NOT NULL,
    next_tool TEXT NOT NULL, next_args TEXT, confidence REAL DEFAULT 0.0,
    used_count INTEGER DEFAULT 0, created_at TEXT NOT NULL, updated_at TEXT NOT NULL
);
CREATE TABLE scheduled_tasks (
    id TEXT PRIMARY KEY, name TEXT NOT NULL, cron_expr TEXT NOT NULL,
    original_schedule TEXT NOT NULL, prompt TEXT NOT NULL, source TEXT NOT NULL,
    is_oneshot INTEGER DEFAULT 0, is_paused INTEGER DEFAULT 0, is_trusted INTEGER DEFAULT 0,
    next_run_at TEXT, last_run_at TEXT, created_at TEXT NOT NULL, updated_at TEXT NOT NULL
);
CREATE TABLE terminal_allowed_prefixes (prefix TEXT PRIMARY KEY);
"""
"""The seed's documented layout: five tables, no event log."""

MESSAGE_COLUMNS = ("id, session_id, role, content, tool_call_id, tool_name, tool_calls_json, "
                   "created_at, importance, embedding, embedding_error, consolidated_at")
FACT_COLUMNS = "id, category, key, value, source, created_at, updated_at"
MACRO_COLUMNS = ("id, trigger_tool, trigger_args_pattern, next_tool, next_args, confidence, "
                 "used_count, created_at, updated_at")
TASK_COLUMNS = ("id, name, cron_expr, original_schedule, prompt, source, is_oneshot, "
                "is_paused, is_trusted, next_run_at, last_run_at, created_at, updated_at")
TIME_COLUMNS = {"created_at", "updated_at", "next_run_at", "last_run_at", "consolidated_at"}


def message_rows() -> list[tuple[Any, ...]]:
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


def fact_rows() -> list[tuple[Any, ...]]:
    return [
        (3, "user", "timezone", "Europe/Lisbon", "user", "2024-01-01T10:00:00+00:00",
         "2024-02-01T09:30:00.250Z"),
        # SQLite's CURRENT_TIMESTAMP form: UTC without an offset.
        (7, "project", "deploy_day", "Tuesday", "agent", "2024-01-05 08:00:00",
         "2024-01-06 18:45:10"),
        (12, "user", "allergy", "peanuts (severe)", "user", "2023-12-24T23:59:59+01:00",
         "2023-12-24T23:59:59+01:00"),
    ]


def macro_rows() -> list[tuple[Any, ...]]:
    return [
        (1, "read_file", '{"path":"<path>"}', "edit_file", '{"path":"$0.path"}', 0.85, 4,
         "2024-01-01T10:00:00Z", "2024-03-01T12:00:00Z"),
        (5, "git_status", "*", "git_diff", None, 0.5, 0, "2024-01-02T10:00:00Z",
         "2024-01-02T10:00:00Z"),
        (9, "read_file", "*", "run_tests", '{"target":"all"}', 0.0, 17,
         "2024-01-03 10:00:00", "2024-01-04 11:00:00"),
    ]


TASK_A, TASK_B, TASK_C = ("0f9c1a52-7a44-4c1e-9d52-aa0c1e2d3f01",
                          "0f9c1a52-7a44-4c1e-9d52-aa0c1e2d3f02", "nightly_backup")


def task_rows() -> list[tuple[Any, ...]]:
    return [
        (TASK_A, "morning-brief", "30 8 * * 1-5", "weekdays at 8:30am",
         "Summarise the overnight alerts.", "tool", 0, 0, 0, "2024-03-04T08:30:00Z",
         "2024-03-01T08:30:00Z", "2024-01-01T10:00:00Z", "2024-03-01T08:30:05Z"),
        (TASK_B, "weekly-cleanup", "0 3 * * 0", "every Sunday at 3am",
         "Delete build artefacts older than a week.", "config", 0, 1, 1, None,
         "2024-02-25T03:00:00Z", "2024-01-01T10:00:00Z", "2024-02-26T09:00:00Z"),
        (TASK_C, "one-off-report", "0 17 5 3 *", "on March 5th at 5pm",
         "Send the quarterly report.", "tool", 1, 0, 1, "2024-03-05 17:00:00", None,
         "2024-03-01 09:00:00", "2024-03-01 09:00:00"),
    ]


PREFIXES = ["git status", "ls", "npm run test"]


def make_seed(path: Path, **extra: list[tuple[Any, ...]]) -> None:
    """A database exactly as the seed documents it, with rows in every table."""
    conn = apsw.Connection(str(path))
    conn.execute(SEED_SCHEMA)
    tables = {
        "messages": (MESSAGE_COLUMNS, message_rows()),
        "facts": (FACT_COLUMNS, fact_rows()),
        "macros": (MACRO_COLUMNS, macro_rows()),
        "scheduled_tasks": (TASK_COLUMNS, task_rows()),
        "terminal_allowed_prefixes": ("prefix", [(p,) for p in PREFIXES]),
    }
    for table, (columns, rows) in tables.items():
        marks = ", ".join("?" * len(columns.split(",")))
        conn.executemany(f"INSERT INTO {table} ({columns}) VALUES ({marks})",
                         rows + extra.get(table, []))
    conn.close()


def upgraded(path: Path) -> apsw.Connection:
    conn = open_connection(path)
    schema.migrate(conn)
    return conn


def same(expected: list[tuple[Any, ...]], got: list[tuple[Any, ...]], columns: str) -> None:
    """Field by field; a timestamp may change its form (memq stores UTC), not its instant."""
    names = [c.strip() for c in columns.split(",")]
    assert len(got) == len(expected)
    for want_row, got_row in zip(expected, got, strict=True):
        for name, want, value in zip(names, want_row, got_row, strict=True):
            if name in TIME_COLUMNS and want is not None:
                assert instant(value) == instant(want), (name, want_row)
                assert value.endswith("Z"), value  # memq's form: RFC3339 UTC
            else:
                assert value == want, (name, want_row)


def instant(text: str) -> datetime:
    if " " in text:  # SQLite's form is UTC
        text = text.replace(" ", "T") + "Z"
    return parse_rfc3339(text)


# -- the upgrade ------------------------------------------------------------------------------


def test_every_row_of_every_table_survives_field_by_field(tmp_path: Path) -> None:
    path = tmp_path / "seed.db"
    make_seed(path)
    conn = upgraded(path)
    got = conn.execute(f"SELECT {MESSAGE_COLUMNS} FROM messages ORDER BY id").fetchall()
    same(message_rows(), got, MESSAGE_COLUMNS)
    same(fact_rows(), conn.execute(f"SELECT {FACT_COLUMNS} FROM facts ORDER BY id").fetchall(),
         FACT_COLUMNS)
    same(macro_rows(), conn.execute(f"SELECT {MACRO_COLUMNS} FROM macros ORDER BY id").fetchall(),
         MACRO_COLUMNS)
    tasks = conn.execute(f"SELECT {TASK_COLUMNS} FROM scheduled_tasks ORDER BY id").fetchall()
    same(sorted(task_rows()), tasks, TASK_COLUMNS)
    assert {r[0] for r in conn.execute("SELECT tz FROM scheduled_tasks")} == {"UTC"}
    assert sorted(approved_prefixes(conn)) == PREFIXES
    conn.close()
    assert rebuild.check(path) == []


def test_the_legacy_tables_are_kept_untouched(tmp_path: Path) -> None:
    path = tmp_path / "seed.db"
    make_seed(path)
    conn = upgraded(path)
    kept = {
        "legacy_messages": (MESSAGE_COLUMNS, message_rows()),
        "legacy_facts": (FACT_COLUMNS, fact_rows()),
        "legacy_macros": (MACRO_COLUMNS, macro_rows()),
        "legacy_scheduled_tasks": (TASK_COLUMNS, task_rows()),
        "legacy_terminal_allowed_prefixes": ("prefix", [(p,) for p in PREFIXES]),
    }
    for table, (columns, rows) in kept.items():
        assert conn.execute(f"SELECT {columns} FROM {table} ORDER BY rowid").fetchall() == rows


def test_one_event_per_row_with_ids_that_do_not_change(tmp_path: Path) -> None:
    first, second = tmp_path / "one.db", tmp_path / "two.db"
    for path in (first, second):
        make_seed(path)
    logs = []
    for path in (first, second):
        conn = upgraded(path)
        logs.append(conn.execute(
            # created_at too, except for approvals: the seed did not record when.
            """SELECT seq, event_id, type, session_id, payload,
                      CASE WHEN type = 'prefix.allowed' THEN NULL ELSE created_at END
               FROM events ORDER BY seq""").fetchall())
        conn.close()
    assert logs[0] == logs[1]  # deterministic: another run could never import a row twice
    types = [row[2] for row in logs[0]]
    assert types == (["message.imported"] * 4 + ["fact.imported"] * 3
                     + ["macro.imported"] * 3 + ["task.imported"] * 3 + ["prefix.allowed"] * 3)
    assert logs[0][0][1] == legacy_event_id("a1")
    assert logs[0][4][1] == legacy_event_id("3", "facts")


def test_a_repeated_upgrade_changes_nothing(tmp_path: Path) -> None:
    path = tmp_path / "seed.db"
    make_seed(path)
    conn = open_connection(path)
    assert "0009_import_legacy_tables" in schema.migrate(conn)
    before = snapshot(conn)
    assert schema.migrate(conn) == []
    assert snapshot(conn) == before
    # Even with its record gone, the import would be a no-op: every event id is known.
    conn.execute("DELETE FROM schema_migrations WHERE name = '0009_import_legacy_tables'")
    assert schema.migrate(conn) == ["0009_import_legacy_tables"]
    assert snapshot(conn) == before


def snapshot(conn: apsw.Connection) -> dict[str, list[tuple[Any, ...]]]:
    tables = ("events", *schema.PROJECTION_TABLES)
    return {t: conn.execute(f"SELECT * FROM {t} ORDER BY 1").fetchall() for t in tables}


def test_a_seed_database_an_older_memq_half_upgraded(tmp_path: Path) -> None:
    """Before this upgrade existed, 0001 ran and 0002 failed ("table facts already exists")."""
    path = tmp_path / "seed.db"
    make_seed(path)
    conn = open_connection(path)
    conn.execute("CREATE TABLE schema_migrations (name TEXT PRIMARY KEY, applied_at TEXT)")
    schema._apply_one(conn, schema.MIGRATIONS[0])
    assert schema.migrate(conn)[0] == "0001b_legacy_tables_aside"
    same(fact_rows(), conn.execute(f"SELECT {FACT_COLUMNS} FROM facts ORDER BY id").fetchall(),
         FACT_COLUMNS)
    assert conn.execute("SELECT count(*) FROM messages").fetchall() == [(4,)]
    conn.close()
    assert rebuild.check(path) == []


def test_a_memq_database_is_not_touched_by_the_new_migrations(tmp_path: Path) -> None:
    conn = open_connection(tmp_path / "memq.db")
    conn.execute("CREATE TABLE schema_migrations (name TEXT PRIMARY KEY, applied_at TEXT)")
    new = ("0001b_legacy_tables_aside", "0009_import_legacy_tables")
    for migration in schema.MIGRATIONS:
        if migration.name not in new:
            schema._apply_one(conn, migration)
    conn.execute("INSERT INTO facts (category, key, value, source, created_at, updated_at) "
                 "VALUES ('c', 'k', 'v', 'agent', 't', 't')")
    before = snapshot(conn)
    assert schema.migrate(conn) == list(new)
    assert snapshot(conn) == before


# -- what memq then does with the imported rows ------------------------------------------------


def test_imported_rows_behave_as_memq_rows(tmp_path: Path) -> None:
    path = tmp_path / "seed.db"
    make_seed(path)
    conn = upgraded(path)
    # The user's timezone is a user fact: the guard protects it from agents.
    history = fact_history(conn, "user", "timezone")
    assert [(c.action, c.value, c.source, c.applied) for c in history] == [
        ("imported", "Europe/Lisbon", "user", True)]
    # Approvals work as approvals.
    approved = set(approved_prefixes(conn))
    assert is_command_allowed("git status -s && ls -la", approved)
    assert not is_command_allowed("git push", approved)


# -- rows memq cannot take: the upgrade stops, names the row, and can be repeated -------------


BAD_ROWS: list[tuple[str, tuple[Any, ...], str]] = [
    ("facts", (40, "user", "name", "Dana", "robot", "2024-01-01T00:00:00Z",
               "2024-01-01T00:00:00Z"), "legacy fact 40 cannot be imported: fact.imported: "
                                        "payload.source must be one of agent, user"),
    ("facts", (41, "user", "x", "y", "user", "yesterday", "2024-01-01T00:00:00Z"),
     "legacy fact 41 cannot be imported: created_at must be an RFC3339 string"),
    ("macros", (40, "a", "*", "b", None, 1.5, 0, "2024-01-01T00:00:00Z",
                "2024-01-01T00:00:00Z"),
     "legacy macro 40 cannot be imported: macro.imported: payload.confidence must be between"),
    ("macros", (41, "read_file", '{"path":"<path>"}', "edit_file", None, 0.5, 0,
                "2024-01-01T00:00:00Z", "2024-01-01T00:00:00Z"),
     "legacy macro 41 cannot be imported: macro 41 (read_file"),
    ("scheduled_tasks", ("t-40", "bad", "whenever", "whenever", "p", "tool", 0, 0, 0, None,
                         None, "2024-01-01T00:00:00Z", "2024-01-01T00:00:00Z"),
     "legacy task t-40 cannot be imported:"),
    ("scheduled_tasks", ("task with spaces", "n", "0 3 * * 0", "weekly", "p", "tool", 0, 0, 0,
                         None, None, "2024-01-01T00:00:00Z", "2024-01-01T00:00:00Z"),
     "legacy task task with spaces cannot be imported: task.imported: payload.task_id must be "
     "1-100 letters"),
    ("scheduled_tasks", ("t-41", "n", "0 3 * * 0", "weekly", "p", "tool", 0, 2, 0,
                         None, None, "2024-01-01T00:00:00Z", "2024-01-01T00:00:00Z"),
     "legacy task t-41 cannot be imported: task.imported: payload.paused must be a boolean"),
    ("terminal_allowed_prefixes", ("rm -rf /; ls",),
     "legacy approval rm -rf /; ls cannot be imported: prefix contains a shell metachar"),
]


@pytest.mark.parametrize(("table", "row", "message"), BAD_ROWS,
                         ids=[f"{t}-{r[0]}" for t, r, _ in BAD_ROWS])
def test_a_row_memq_cannot_take_stops_the_upgrade_and_it_can_be_repeated(
    tmp_path: Path, table: str, row: tuple[Any, ...], message: str
) -> None:
    path = tmp_path / "seed.db"
    make_seed(path, **{table: [row]})
    conn = open_connection(path)
    with pytest.raises(MigrationError) as caught:
        schema.migrate(conn)
    assert message in str(caught.value)
    assert f"fix or delete that row in {table}" in str(caught.value)
    # Nothing half-done: the upgrade is one transaction, and the database is as it was.
    assert schema.applied(conn) == []
    assert not conn.execute("SELECT 1 FROM sqlite_master WHERE name = 'events'").fetchall()
    key = "prefix" if table == "terminal_allowed_prefixes" else "id"
    conn.execute(f"DELETE FROM {table} WHERE {key} = ?", (row[0],))
    assert sorted(schema.migrate(conn)) == sorted(m.name for m in schema.MIGRATIONS)
    same(fact_rows(), conn.execute(f"SELECT {FACT_COLUMNS} FROM facts ORDER BY id").fetchall(),
         FACT_COLUMNS)
    conn.close()
    assert rebuild.check(path) == []


def test_a_bad_message_row_stops_the_upgrade_and_it_can_be_repeated(tmp_path: Path) -> None:
    path = tmp_path / "seed.db"
    make_seed(path, messages=[("bad", "s", "robot", "x", None, None, None,
                               "2024-01-01T00:00:00Z", 0.5, None, None, None)])
    conn = open_connection(path)
    with pytest.raises(MigrationError, match="legacy message bad cannot be imported"):
        schema.migrate(conn)
    # Nothing half-done: the database is as it was, legacy rows and all, and no event.
    assert conn.execute("SELECT count(*) FROM messages").fetchall() == [(5,)]
    assert schema.applied(conn) == []
    assert not conn.execute("SELECT 1 FROM sqlite_master WHERE name = 'events'").fetchall()
    conn.execute("DELETE FROM messages WHERE id = 'bad'")
    schema.migrate(conn)
    same(message_rows(),
         conn.execute(f"SELECT {MESSAGE_COLUMNS} FROM messages ORDER BY id").fetchall(),
         MESSAGE_COLUMNS)


def test_a_legacy_importance_that_is_not_a_number_is_named(tmp_path: Path) -> None:
    path = tmp_path / "seed.db"
    make_seed(path, messages=[("odd", "s", "user", "x", None, None, None,
                               "2024-01-01T00:00:00Z", "high", None, None, None)])
    with pytest.raises(MigrationError, match="legacy message odd cannot be imported: could "
                                             "not convert string to float: 'high'"):
        schema.migrate(open_connection(path))


def test_legacy_json_embedding_is_still_readable(tmp_path: Path) -> None:
    from memq.store import vectors

    path = tmp_path / "seed.db"
    make_seed(path)
    conn = upgraded(path)
    (blob,) = conn.execute("SELECT embedding FROM messages WHERE id = 'a1'").fetchone()
    assert vectors.decode(blob).tolist() == pytest.approx([0.125, -0.5, 0.333333333333, 1e-7])
    dims = conn.execute("SELECT id, embedding_dim FROM messages ORDER BY id").fetchall()
    assert dims == [("a1", 4), ("a2", None), ("a3", 4), ("a4", None)]


def test_a_messages_only_legacy_database_still_upgrades(tmp_path: Path) -> None:
    path = tmp_path / "legacy.db"
    conn = apsw.Connection(str(path))
    conn.execute(SEED_SCHEMA.split("CREATE TABLE facts")[0])
    conn.executemany(f"INSERT INTO messages ({MESSAGE_COLUMNS}) VALUES ({', '.join('?' * 12)})",
                     message_rows())
    conn.close()
    conn = upgraded(path)
    same(message_rows(),
         conn.execute(f"SELECT {MESSAGE_COLUMNS} FROM messages ORDER BY id").fetchall(),
         MESSAGE_COLUMNS)
    assert conn.execute("SELECT count(*) FROM facts").fetchall() == [(0,)]


# -- a legacy file made by another program's umask ends private -------------------------------


def test_a_0644_seed_database_ends_0600_with_its_wal_and_shm(tmp_path: Path) -> None:
    path = tmp_path / "seed.db"
    make_seed(path)
    # The seed ran in WAL mode: a crashed process leaves -wal and -shm beside the file.
    keeper = apsw.Connection(str(path))
    keeper.pragma("journal_mode", "wal")
    keeper.execute("INSERT INTO terminal_allowed_prefixes VALUES ('make test')")
    for suffix in ("", "-wal", "-shm"):
        os.chmod(f"{path}{suffix}", 0o644)
    done = subprocess.run([sys.executable, "-m", "memq", "migrate", "--db", str(path)],
                          cwd=ROOT, env=env(), capture_output=True, text=True, timeout=120,
                          check=False)
    assert done.returncode == 0, done.stderr
    for suffix in ("", "-wal", "-shm"):
        assert stat.S_IMODE(os.stat(f"{path}{suffix}").st_mode) == 0o600, suffix
    keeper.close()
    conn = open_connection(path, readonly=True)
    assert "make test" in approved_prefixes(conn)


def test_the_documented_layout_is_the_one_tested() -> None:
    """docs/legacy-layout.md shows the seed's DDL: the same SQL these tests build from."""
    doc = (Path(__file__).resolve().parents[2] / "docs" / "legacy-layout.md").read_text()
    block = doc.split("```sql\n", 1)[1].split("```", 1)[0]
    assert block.strip() == SEED_SCHEMA.strip()
