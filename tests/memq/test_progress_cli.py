"""Long operations show their progress: the legacy import of ``memq migrate`` and
``memq rebuild`` (plain lines here, since the test's stderr is not a terminal)."""

from __future__ import annotations

from pathlib import Path

import apsw
import pytest

from memq import MemoryClient
from memq.cli import main
from memq.config import Config
from memq.testing import WriterThread

LEGACY_ROWS = 2500


def legacy_database(path: Path) -> None:
    conn = apsw.Connection(str(path))
    conn.execute("""CREATE TABLE messages (id TEXT PRIMARY KEY, session_id TEXT, role TEXT,
                    content TEXT, created_at TEXT, importance REAL)""")
    with conn:
        conn.executemany(
            "INSERT INTO messages VALUES (?, ?, 'user', ?, '2024-01-01T00:00:00Z', 0.5)",
            [(f"m{i}", f"s{i % 7}", f"legacy {i}") for i in range(LEGACY_ROWS)])
    conn.close()


def test_migrate_shows_the_legacy_import(tmp_path: Path, capsys) -> None:
    db = tmp_path / "legacy.db"
    legacy_database(db)
    assert main(["migrate", "--db", str(db)]) == 0
    captured = capsys.readouterr()
    lines = [line for line in captured.err.splitlines() if "importing legacy messages" in line]
    assert lines, captured.err
    assert f"{LEGACY_ROWS}/{LEGACY_ROWS} 100.0%" in lines[-1]
    assert "0003_import_legacy_messages" in captured.out


def test_migrate_shows_each_legacy_table(tmp_path: Path, capsys) -> None:
    db = tmp_path / "legacy.db"
    legacy_database(db)
    conn = apsw.Connection(str(db))
    conn.execute("CREATE TABLE terminal_allowed_prefixes (prefix TEXT PRIMARY KEY)")
    conn.executemany("INSERT INTO terminal_allowed_prefixes VALUES (?)", [("ls",), ("pwd",)])
    conn.close()
    assert main(["migrate", "--db", str(db)]) == 0
    err = capsys.readouterr().err
    assert f"] {LEGACY_ROWS}/{LEGACY_ROWS} 100.0%" in err
    last = err.splitlines()[-1]
    assert last.startswith("importing legacy terminal_allowed_prefixes")
    assert "2/2 100.0%" in last


def test_migrate_of_a_new_database_draws_no_bar(tmp_path: Path, capsys) -> None:
    assert main(["migrate", "--db", str(tmp_path / "new.db")]) == 0
    assert "importing" not in capsys.readouterr().err


@pytest.mark.redis
def test_rebuild_shows_progress(config: Config, capsys) -> None:
    running = WriterThread(config)
    running.start()
    with MemoryClient(config=config) as client:
        for i in range(30):
            client.append("s1", "user", f"m{i}")
        client.flush()
    running.stop()
    assert main(["rebuild", "--db", config.db_path]) == 0
    captured = capsys.readouterr()
    assert "rebuilding projections" in captured.err
    assert "30/30 100.0%" in captured.err.splitlines()[-1]
    assert "rebuilt projections from 30 events" in captured.out
