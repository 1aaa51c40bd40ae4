"""Projections rebuilt from the log equal the live ones; a difference is found."""

from __future__ import annotations

import subprocess
from pathlib import Path

import apsw
import pytest

from memq import MemoryClient
from memq.config import Config
from memq.errors import StoreError
from memq.store import rebuild
from memq.testing import WriterThread
from tests.conftest import ROOT, memq_command, write_directly

pytestmark = pytest.mark.redis


def fill(client: MemoryClient) -> None:
    for i in range(30):
        client.append(f"s{i % 3}", "user", f"message {i}", importance=(i % 10) / 10)
    client.flush()


def test_check_passes_on_a_consistent_database(client: MemoryClient, config: Config) -> None:
    fill(client)
    assert rebuild.check(config.db_path) == []


def test_check_reports_a_tampered_projection(client: MemoryClient, config: Config) -> None:
    fill(client)
    write_directly(config.db_path, "UPDATE messages SET content = 'tampered' WHERE rowid = 3")
    differences = rebuild.check(config.db_path)
    assert differences
    assert differences[0].startswith("messages:")
    done = subprocess.run(memq_command("rebuild", "--check", "--db", config.db_path),
                          capture_output=True, text=True, cwd=ROOT, timeout=60)
    assert done.returncode == 1
    assert "projections differ from the log" in done.stdout


@pytest.mark.parametrize("tamper", [
    # A message's words gone from the index, the message still there.
    "DELETE FROM messages_fts WHERE rowid = (SELECT max(seq) FROM messages)",
    # Words of a message that is not there (as a forget that left the index would).
    "INSERT INTO messages_fts (rowid, content, session) VALUES (999999, 'leftover', 'sx')",
    # Another message's words indexed again under its position.
    "INSERT INTO messages_fts (rowid, content, session) "
    "SELECT seq, 'message 7', 's73x' FROM messages WHERE content = 'message 1'",
])
def test_check_reports_a_lexical_index_that_differs(
    client: MemoryClient, config: Config, tamper: str
) -> None:
    fill(client)
    write_directly(config.db_path, tamper)
    differences = rebuild.check(config.db_path)
    assert differences
    assert all(d.startswith("messages_fts:") for d in differences)


def test_rebuild_repairs_and_refuses_while_writer_runs(
    client: MemoryClient, config: Config, writer: WriterThread
) -> None:
    fill(client)
    write_directly(config.db_path, "DELETE FROM messages WHERE rowid % 2 = 0")
    done = subprocess.run(memq_command("rebuild", "--db", config.db_path),
                          capture_output=True, text=True, cwd=ROOT, timeout=60)
    assert done.returncode == 1
    assert "stop the writer first, then rebuild" in done.stderr
    writer.stop()
    assert rebuild.rebuild(config.db_path) == 30
    assert rebuild.check(config.db_path) == []
    done = subprocess.run(memq_command("rebuild", "--check", "--db", config.db_path),
                          capture_output=True, text=True, cwd=ROOT, timeout=60)
    assert done.returncode == 0, done.stderr
    assert "projections match the log" in done.stdout


def test_checking_an_unmigrated_file_says_so(tmp_path: Path) -> None:
    db = tmp_path / "seed.db"
    apsw.Connection(str(db)).execute("CREATE TABLE messages (id TEXT PRIMARY KEY)")
    with pytest.raises(StoreError, match=r"is not migrated \(\d+ migrations pending"):
        rebuild.check(db)
