"""The command line: exit codes and one-line errors, never a traceback for a user mistake."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from memq.cli import main
from tests.conftest import ROOT, memq_command


def run(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(memq_command(*args), capture_output=True, text=True, cwd=ROOT,
                          timeout=60)


def test_usage_error_exits_2() -> None:
    done = run("no-such-command")
    assert done.returncode == 2
    assert "invalid choice" in done.stderr


def test_user_error_exits_1_with_one_line(tmp_path: Path) -> None:
    done = run("rejected", "list", "--db", str(tmp_path / "absent.db"))
    assert done.returncode == 1
    assert done.stderr.strip().count("\n") == 0
    assert done.stderr.startswith("memq: error: database not found")


def test_bad_config_is_reported(tmp_path: Path) -> None:
    bad = tmp_path / "memq.toml"
    bad.write_text("[retrieval]\nnope = 1\n")
    done = run("migrate", "--config", str(bad), "--db", str(tmp_path / "x.db"))
    assert done.returncode == 1
    assert "unknown key(s) in [retrieval]: nope" in done.stderr
    assert "Traceback" not in done.stderr


def test_migrate_then_rejected_list(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    db = str(tmp_path / "m.db")
    assert main(["migrate", "--db", db]) == 0
    assert "applied: 0001_event_log" in capsys.readouterr().out
    assert main(["migrate", "--db", db]) == 0
    assert "schema is up to date" in capsys.readouterr().out
    assert main(["rejected", "list", "--db", db]) == 0
    assert "no rejected events" in capsys.readouterr().out


def test_replay_needs_ids(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    db = str(tmp_path / "m.db")
    main(["migrate", "--db", db])
    assert main(["rejected", "replay", "--db", db]) == 1
    assert "name the rejected event ids" in capsys.readouterr().err
    assert main(["rejected", "replay", "7", "--db", db]) == 1
    assert "no rejected event with id 7" in capsys.readouterr().err
