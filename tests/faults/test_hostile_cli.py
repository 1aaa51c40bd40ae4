"""Hostile command lines: every one exits 2 (usage) or 1 (anything else) with a one-line
message naming the problem, and never a traceback.

Most run in-process through ``memq.cli.main`` (fast, and able to pass a NUL or a lone
surrogate, which a real argv cannot); those that would start a server or a worker loop run
as real processes with a timeout.
"""

from __future__ import annotations

import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import apsw
import pytest
import redis

from memq import names
from memq.cli import main
from memq.config import Config
from memq.testing import RedisServer, WriterThread
from tests.conftest import ROOT
from tests.faults import figures
from tests.faults.procs import env

pytestmark = [pytest.mark.faults, pytest.mark.redis]

DEAD_REDIS = "redis://:Secret-in-url@127.0.0.1:1/0"
"""Nothing listens on port 1; the password must not show in any message."""


@dataclass(frozen=True)
class Cli:
    label: str
    argv: tuple[str, ...]
    code: int
    fragment: str
    stream: str = "err"


def usage(label: str, fragment: str, *argv: str) -> Cli:
    return Cli(label, argv, 2, fragment)


def error(label: str, fragment: str, *argv: str, stream: str = "err") -> Cli:
    return Cli(label, argv, 1, fragment, stream)


USAGE = [
    usage("no command", "the following arguments are required: COMMAND"),
    usage("unknown command", "invalid choice: 'explode'", "explode"),
    usage("SQL as a command", "invalid choice", "'; DROP TABLE events; --"),
    usage("worker without a kind", "the following arguments are required: kind", "worker"),
    usage("worker of an unknown kind", "invalid choice: 'pickle'", "worker", "pickle"),
    usage("rejected without an action", "required: ACTION", "rejected"),
    usage("replay of a word", "whole number of at most 18 digits: 'abc'",
          "rejected", "replay", "abc"),
    usage("replay of a float", "whole number of at most 18 digits: '1e3'",
          "rejected", "replay", "1e3"),
    usage("replay of a NUL", "not a whole number", "rejected", "replay", "1\x00"),
    usage("metrics port too big", "a port number is from 0 to 65535, got 99999",
          "metrics", "--port", "99999"),
    usage("metrics port a word", "not a port number: 'http'", "metrics", "--port", "http"),
    usage("dashboard port negative", "a port number is from 0 to 65535, got -5",
          "dashboard", "--port=-5"),
    usage("scheduler interval 0", "a positive number of seconds, got 0",
          "scheduler", "--interval", "0"),
    usage("scheduler interval NaN", "a positive number of seconds, got nan",
          "scheduler", "--interval", "nan"),
    usage("scheduler interval a word", "not a number of seconds: 'soon'",
          "scheduler", "--interval", "soon"),
    usage("demo timeout negative", "must be a positive number of seconds",
          "demo", "--timeout=-1"),
    usage("demo timeout infinite", "must be a positive number of seconds",
          "demo", "--timeout", "inf"),
    usage("parse without text", "the following arguments are required: text", "tasks", "parse"),
    usage("unknown option", "unrecognized arguments: --bogus", "status", "--bogus"),
    usage("option without its value", "expected one argument", "up", "--redis-url"),
    usage("db without its value", "expected one argument", "rebuild", "--check", "--db"),
    # Values memq itself refuses on the command line are usage errors too.
    usage("replay without ids", "name the rejected event ids to replay, or pass --all",
          "rejected", "replay", "--db", "{db}"),
    usage("parse nonsense", "cannot understand schedule 'whenever'", "tasks", "parse", "whenever"),
    usage("parse in an unknown zone", "unknown time zone 'Mars/Olympus'",
          "tasks", "parse", "--tz", "Mars/Olympus", "daily"),
    usage("parse with a NUL", "cannot understand schedule", "tasks", "parse", "daily\x00at 9"),
    usage("parse with an undecodable byte", "cannot understand schedule '\\udcff'",
          "tasks", "parse", "\udcff"),
    usage("parse of 1000 characters", "schedule text is longer than 200 characters",
          "tasks", "parse", "x" * 1000),
    usage("context of an unknown profile", "argument --profile: unknown profile 'bogus'",
          "context", "s1", "--profile", "bogus", "--db", "{db}"),
    usage("context of a blank session", "session_id must not be empty",
          "context", " ", "--db", "{db}", "--model-dir", "{dir}"),
]

ERRORS = [
    error("replay of an unknown id", "no rejected event with id 999",
          "rejected", "replay", "999", "--db", "{db}", "--redis-url", "{url}"),
    error("replay to a dead Redis", "replaying rejected events failed at "
          "redis://:***@127.0.0.1:1/0", "rejected", "replay", "1", "--db", "{db}",
          "--redis-url", DEAD_REDIS),
    error("list of a missing database", "database not found: {missing}",
          "rejected", "list", "--db", "{missing}"),
    error("check of a missing database", "database not found: {missing}",
          "rebuild", "--check", "--db", "{missing}"),
    error("rebuild of a missing database", "database not found: {missing}",
          "rebuild", "--db", "{missing}"),
    error("tasks list of a missing database", "database not found: {missing}",
          "tasks", "list", "--db", "{missing}"),
    error("migrate into a directory", "cannot open database {dir}: [Errno 21] Is a directory",
          "migrate", "--db", "{dir}"),
    error("migrate with a NUL in the path", "embedded null byte", "migrate", "--db", "a\x00b"),
    error("migrate under /proc", "cannot", "migrate", "--db", "/proc/memq/memq.db"),
    error("migrate a file that is not a database", "file is not a database",
          "migrate", "--db", "{garbage}"),
    error("check a file that is not a database", "file is not a database",
          "rebuild", "--check", "--db", "{garbage}"),
    error("list a file that is not a database", "file is not a database",
          "rejected", "list", "--db", "{garbage}"),
    error("tasks of a file that is not a database", "file is not a database",
          "tasks", "list", "--db", "{garbage}"),
    error("status of a file that is not a database", "file is not a database",
          "status", "--db", "{garbage}", "--redis-url", "{url}", stream="out"),
    error("missing config file", "configuration file not found: {missing}",
          "status", "--config", "{missing}"),
    error("config that is not TOML", "is not valid TOML", "status", "--config", "{toml_bad}"),
    error("config that is binary", "is not valid TOML", "status", "--config", "{garbage}"),
    error("config that is a directory", "cannot read the configuration file {dir}",
          "status", "--config", "{dir}"),
    error("config with an unknown key", "{toml_unknown}: unknown key(s) in [writer]: bogus",
          "status", "--config", "{toml_unknown}"),
    error("config with a wrong type", "[writer] batch_size must be int, got 'many'",
          "status", "--config", "{toml_type}"),
    error("config with a negative retry", "[client] retry_for_s must be between 0 and 3600",
          "status", "--config", "{toml_retry}"),
    error("status of an invalid URL", "invalid Redis URL", "status", "--db", "{db}",
          "--redis-url", "not a url", stream="out"),
    error("status of an http URL", "invalid Redis URL", "status", "--db", "{db}",
          "--redis-url", "http://127.0.0.1:1/", stream="out"),
    error("status of a dead Redis", "redis://:***@127.0.0.1:1/0", "status", "--db", "{db}",
          "--redis-url", DEAD_REDIS, stream="out"),
]

CASES = USAGE + ERRORS


@pytest.fixture(scope="module")
def paths(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, str]]:
    """A database with one rejected event, files that are not what they claim, a Redis."""
    directory = tmp_path_factory.mktemp("hostile-cli")
    server = RedisServer(directory)
    server.start()
    config = Config(redis_url=server.url, db_path=str(directory / "memq.db"))
    writer = WriterThread(config)
    writer.start()
    broker = redis.Redis.from_url(server.url)
    broker.xadd(names.INBOX_STREAM, {names.EVENT_FIELD: b"garbage"})
    _wait_for_rejection(config)
    writer.stop()
    files = {
        "toml_bad": "[writer\nbatch_size = ",
        "toml_unknown": "[writer]\nbogus = 1\n",
        "toml_type": "[writer]\nbatch_size = 'many'\n",
        "toml_retry": "[client]\nretry_for_s = -1.0\n",
    }
    found = {"db": config.db_path, "url": server.url, "dir": str(directory),
             "missing": str(directory / "nope" / "memq.db"),
             "garbage": str(directory / "garbage.bin")}
    (directory / "garbage.bin").write_bytes(b"\xff\xfe not sqlite, not toml \x00" * 200)
    for name, text in files.items():
        (directory / f"{name}.toml").write_text(text)
        found[name] = str(directory / f"{name}.toml")
    yield found
    server.stop()


def _wait_for_rejection(config: Config) -> None:
    for _ in range(500):
        conn = apsw.Connection(config.db_path, flags=apsw.SQLITE_OPEN_READONLY)
        try:
            if conn.execute("SELECT count(*) FROM rejected_events").fetchone()[0]:
                return
        finally:
            conn.close()
        time.sleep(0.01)
    pytest.fail("the garbage entry was never set aside")


@pytest.mark.parametrize("case", CASES, ids=[c.label for c in CASES])
def test_hostile_command_line(case: Cli, paths: dict[str, str],
                              capsys: pytest.CaptureFixture[str]) -> None:
    argv = [arg.format(**paths) for arg in case.argv]
    try:
        code = main(argv)
    except SystemExit as exc:  # argparse's usage errors
        code = exc.code
    out, err = capsys.readouterr()
    shown = out if case.stream == "out" else err
    assert code == case.code, out + err
    assert case.fragment.format(**paths) in shown
    assert "Secret-in-url" not in out + err
    if case.code == 1 and case.stream == "err":
        assert err.startswith("memq: error: ")
        assert err.count("\n") == 1  # one line
    figures.add("bad_inputs")


PROCESS_CASES = [
    Cli("a worker for a dead Redis", ("worker", "tasks", "--burst", "--redis-url", DEAD_REDIS),
        1, "redis://:***@127.0.0.1:1/0"),
    Cli("metrics on an address that is not one",
        ("metrics", "--host", "256.1.1.1", "--port", "0", "--redis-url", DEAD_REDIS),
        1, "cannot serve metrics on 256.1.1.1"),
    Cli("dashboard with a dead Redis",
        ("dashboard", "--host", "256.1.1.1", "--port", "0", "--redis-url", DEAD_REDIS),
        1, "registering memq's queues failed at redis://:***@127.0.0.1:1/0"),
    Cli("up in a place that cannot be created", ("up", "--db", "/proc/memq/memq.db"),
        1, "/proc/memq"),
    Cli("writer in a place that cannot be created",
        ("writer", "--db", "/proc/memq/memq.db", "--redis-url", DEAD_REDIS), 1, "/proc/memq"),
]


@pytest.mark.parametrize("case", PROCESS_CASES, ids=[c.label for c in PROCESS_CASES])
def test_hostile_command_line_as_a_process(case: Cli) -> None:
    done = subprocess.run([sys.executable, "-m", "memq", *case.argv], cwd=ROOT, env=env(),
                          capture_output=True, text=True, timeout=60, check=False)
    assert done.returncode == case.code, done.stderr[-2000:]
    assert case.fragment in done.stderr
    assert "Traceback" not in done.stderr
    assert "Secret-in-url" not in done.stdout + done.stderr
    figures.add("bad_inputs")


def test_the_database_survived_the_command_lines(paths: dict[str, str]) -> None:
    done = subprocess.run([sys.executable, "-m", "memq", "rebuild", "--check", "--db",
                           paths["db"]], cwd=ROOT, env=env(), capture_output=True, text=True,
                          timeout=60, check=False)
    assert done.returncode == 0, done.stdout + done.stderr
    assert Path(paths["db"]).stat().st_size > 0
