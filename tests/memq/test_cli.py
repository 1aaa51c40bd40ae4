"""The command line: exit codes and one-line errors, never a traceback for a user mistake."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import apsw
import orjson
import pytest

from memq import names
from memq.cli import main
from memq.config import Config
from memq.testing import WriterThread
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
    assert main(["rejected", "replay", "--db", db]) == 2  # a usage error
    assert "name the rejected event ids" in capsys.readouterr().err
    assert main(["rejected", "replay", "7", "--db", db]) == 1
    assert "no rejected event with id 7" in capsys.readouterr().err


def test_version(capsys: pytest.CaptureFixture[str]) -> None:
    from memq import __version__

    with pytest.raises(SystemExit) as done:
        main(["--version"])
    assert done.value.code == 0
    assert capsys.readouterr().out == f"memq {__version__}\n"


@pytest.mark.redis
@pytest.mark.parametrize("command", [["migrate"], ["rebuild"]])
def test_migrate_and_rebuild_ask_to_stop_a_running_writer(
    config: Config, writer: WriterThread, command: list[str],
    capsys: pytest.CaptureFixture[str],
) -> None:
    assert main([*command, "--db", config.db_path]) == 1
    err = capsys.readouterr().err
    assert err.startswith(f"memq: error: the writer (pid {os.getpid()}) is running on "
                          f"{config.db_path}: stop the writer first, then {command[0]}")
    assert err.count("\n") == 1


def test_rejected_list_labels_every_column(tmp_path: Path,
                                           capsys: pytest.CaptureFixture[str]) -> None:
    from memq.store.connection import open_connection
    from memq.store.write import rejected

    db = str(tmp_path / "m.db")
    main(["migrate", "--db", db])
    conn = open_connection(db)
    rejected.record(conn.cursor(), names.INBOX_STREAM, "1-0", b"{}", "event must have a type",
                    "2026-01-01T00:00:00.000000Z", None)
    conn.close()
    capsys.readouterr()
    assert main(["rejected", "list", "--db", db]) == 0
    header, row = capsys.readouterr().out.splitlines()
    assert header.split() == ["id", "rejected", "at", "attempts", "sent", "by", "replayed",
                              "at", "reason"]
    assert row.split() == ["1", "2026-01-01T00:00:00.000000Z", "1", "agent", "-", "event",
                           "must", "have", "a", "type"]
    assert main(["rejected", "list", "--json", "--db", db]) == 0
    [shown] = orjson.loads(capsys.readouterr().out)["rejected"]
    assert (shown["id"], shown["raw"], shown["reason"]) == (1, "{}", "event must have a type")


@pytest.mark.parametrize("command", [["worker", "embed", "--burst"], ["up"]])
def test_missing_model_files_stop_the_commands_that_need_them(
    tmp_path: Path, command: list[str]
) -> None:
    env = {**os.environ, "MEMQ_EMBED_MODEL_DIR": "no/model/here"}
    done = subprocess.run(memq_command(*command, "--db", str(tmp_path / "memq.db"),
                                       "--redis-url", "redis://127.0.0.1:1/0"),
                          capture_output=True, text=True, cwd=tmp_path, env=env, timeout=60,
                          check=False)
    assert done.returncode == 1
    where = tmp_path / "no" / "model" / "here"  # made absolute where the command started
    assert done.stderr == (
        f"memq: error: embedding model files missing in {where}: model.onnx, tokenizer.json, "
        "config.json, special_tokens_map.json, tokenizer_config.json (run `memq fetch-model "
        f"--model-dir {where}`, or point [embed] model_dir or MEMQ_EMBED_MODEL_DIR at the "
        "files)\n")


DIGITS = "9" * 5000  # past Python's 4,300-digit int limit: int() raises ValueError
NUMERIC_OPTIONS = [
    ["sessions", "--limit", DIGITS],
    ["sessions", "--limit", "-" + DIGITS],
    ["scheduler", "--interval", DIGITS],
    ["consolidate", "--now", "--wait", DIGITS],
    ["consolidate", "--now", "--min-age-hours", DIGITS],
    ["forget", "session", "s1", "--yes", "--timeout", DIGITS],
    ["allow", "git status", "--wait", DIGITS],
    ["dashboard", "--port", DIGITS],
    ["metrics", "--port", DIGITS],
    ["rejected", "replay", DIGITS],
    ["demo", "--timeout", DIGITS],
    ["audit", "--limit", DIGITS],
]


@pytest.mark.parametrize("argv", NUMERIC_OPTIONS, ids=lambda a: " ".join(a[:2]))
def test_a_number_too_long_is_a_usage_error(argv: list[str],
                                             capsys: pytest.CaptureFixture[str]) -> None:
    """Every numeric option: a 5,000-digit (or infinite) value is refused by argparse
    with exit 2 and a short message, never a traceback or an endless wait."""
    with pytest.raises(SystemExit) as stopped:
        main(argv)
    assert stopped.value.code == 2
    err = capsys.readouterr().err
    assert "error: argument" in err
    assert len(err) < 2000


DATABASE_READS = [["sessions"], ["facts", "list"], ["facts", "history", "c", "k"],
                  ["tasks", "list"], ["audit"], ["rejected", "list"],
                  ["export", "--user", "alice"]]


@pytest.mark.parametrize("argv", DATABASE_READS, ids=" ".join)
def test_a_file_that_is_not_a_memq_database_is_named_not_a_traceback(
        argv: list[str], tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """An empty file (a --db mistyped into a touch) and another program's SQLite database
    once ended these commands in 'apsw.SQLError: no such table'."""
    empty, foreign = tmp_path / "empty.db", tmp_path / "other.db"
    empty.touch()
    conn = apsw.Connection(str(foreign))
    conn.execute("CREATE TABLE notes (body TEXT)")
    conn.close()
    for path, said in ((empty, "holds no memq database yet"),
                       (foreign, "is a SQLite database, but not memq's")):
        assert main([*argv, "--db", str(path)]) == 1
        assert said in capsys.readouterr().err


def test_a_number_too_long_in_the_config_is_reported(tmp_path: Path) -> None:
    bad = tmp_path / "memq.toml"
    bad.write_text(f"[memory]\nworking_memory_cap = {DIGITS}\n")
    done = run("migrate", "--config", str(bad), "--db", str(tmp_path / "x.db"))
    assert done.returncode == 1
    assert "holds a number too long to read" in done.stderr
    assert "Traceback" not in done.stderr


def test_help_groups_every_command_once(capsys: pytest.CaptureFixture[str]) -> None:
    """`memq --help` by section, starting with `up`; a new command must take a place."""
    from memq.cli import SECTIONS, command_names

    listed = [name for _, names in SECTIONS for name in names]
    assert sorted(listed) == sorted(command_names())
    with pytest.raises(SystemExit):
        main(["--help"])
    out = capsys.readouterr().out
    assert out.index("start here:") < out.index("  up ") < out.index("operate:")
    assert "memq [-h] [--version] COMMAND ..." in out


@pytest.mark.redis
def test_rejected_drop_removes_what_it_names(config: Config, writer: WriterThread,
                                             capsys: pytest.CaptureFixture[str]) -> None:
    import redis as redis_client

    from memq import MemoryClient

    redis_client.Redis.from_url(config.redis_url).xadd(
        names.ADMIN_INBOX_STREAM, {names.EVENT_FIELD: b"not an event"})
    with MemoryClient(config=config) as client:
        client.append("s", "user", "behind it")
        client.flush()
    store = ["--db", config.db_path, "--redis-url", config.redis_url]
    assert main(["rejected", "drop", "1", "--wait", "10", *store]) == 0
    assert capsys.readouterr().out == "dropped 1 rejected event(s)\n"
    assert main(["rejected", "list", "--db", config.db_path]) == 0
    assert "no rejected events" in capsys.readouterr().out
    assert main(["rejected", "drop", "1", *store]) == 1
    assert "no rejected event with id 1" in capsys.readouterr().err


@pytest.mark.parametrize("command", ["writer", "serve"])
def test_the_server_and_the_writer_hand_the_interpreter_over_every_millisecond(
    command: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Set before anything else (here the configuration, which is refused): their threads
    mostly wait on sockets and SQLite, and each return waits for the interpreter."""
    intervals: list[float] = []
    monkeypatch.setattr("memq.cli.common.sys.setswitchinterval", intervals.append)
    bad = tmp_path / "memq.toml"
    bad.write_text("[retrieval]\nnope = 1\n")
    assert main([command, "--config", str(bad), "--db", str(tmp_path / "x.db")]) == 1
    assert intervals == [0.001]
