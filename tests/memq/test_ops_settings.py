"""The settings of running the stack: ``[ops]``, the log format override, and finding the
private Redis of ``memq up`` from another shell."""

from __future__ import annotations

import argparse
import logging
from pathlib import Path

import orjson
import pytest

from memq import config as config_module
from memq import logs
from memq.authority import Role
from memq.cli.common import load_config
from memq.errors import ConfigError


def test_ops_defaults_and_overrides() -> None:
    default = config_module.from_mapping({}).ops
    assert (default.dashboard_host, default.dashboard_port) == ("127.0.0.1", 9181)
    assert (default.metrics_host, default.metrics_port) == ("127.0.0.1", 9464)
    changed = config_module.from_mapping({"ops": {"restart_backoff_s": 2, "metrics_port": 1}})
    assert changed.ops.restart_backoff_s == 2.0
    assert changed.ops.metrics_port == 1


def test_ops_typos_and_bad_types_are_errors() -> None:
    with pytest.raises(ConfigError, match=r"unknown key\(s\) in \[ops\]: dashbord_port"):
        config_module.from_mapping({"ops": {"dashbord_port": 1}})
    with pytest.raises(ConfigError, match=r"\[ops\] metrics_port must be int"):
        config_module.from_mapping({"ops": {"metrics_port": "9464"}})


def args(db: Path, redis_url: str | None = None) -> argparse.Namespace:
    return argparse.Namespace(config=None, db=str(db), redis_url=redis_url)


def test_commands_find_the_private_redis_of_their_data_directory(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("MEMQ_REDIS_URL", raising=False)
    monkeypatch.delenv("MEMQ_CONFIG", raising=False)
    monkeypatch.chdir(tmp_path)
    db = tmp_path / "data" / "memq.db"
    assert load_config(args(db)).redis_url == config_module.DEFAULT_REDIS_URL
    db.parent.mkdir()
    (db.parent / "admin.url").write_text("unix://memq-admin:a@/somewhere/redis.sock?db=0\n")
    (db.parent / "worker.url").write_text("unix://memq-worker:w@/somewhere/redis.sock?db=0\n")
    assert load_config(args(db)).redis_url == "unix://memq-admin:a@/somewhere/redis.sock?db=0"
    # each command finds its role's credentials: `memq worker` the worker's
    assert load_config(args(db), role=Role.WORKER).redis_url == \
        "unix://memq-worker:w@/somewhere/redis.sock?db=0"
    assert load_config(args(db), role=Role.AGENT).redis_url == \
        config_module.DEFAULT_REDIS_URL  # no agent.url written
    # anything said explicitly wins, and `memq up` itself does not look
    assert load_config(args(db, "redis://other:1/0")).redis_url == "redis://other:1/0"
    assert load_config(args(db), discover_redis=False).redis_url == \
        config_module.DEFAULT_REDIS_URL
    monkeypatch.setenv("MEMQ_REDIS_URL", "redis://env:2/0")
    assert load_config(args(db)).redis_url == "redis://env:2/0"


@pytest.mark.parametrize(("chosen", "is_json"), [("json", True), ("text", False)])
def test_log_format_can_be_chosen(
    chosen: str, is_json: bool, monkeypatch: pytest.MonkeyPatch, capsys
) -> None:
    monkeypatch.setenv(logs.LOG_FORMAT_ENV, chosen)
    previous = logging.getLogger().handlers[:]
    try:
        logs.setup()
        logs.log(logging.getLogger("memq.test"), "batch committed", size=3)
    finally:
        logging.getLogger().handlers[:] = previous
    line = capsys.readouterr().err.strip().splitlines()[-1]
    if is_json:
        assert orjson.loads(line)["size"] == 3
    else:
        assert line == "info    memq.test: batch committed size=3"


@pytest.mark.parametrize("chosen", ["json", "text"])
def test_routine_lines_show_only_in_json(chosen: str, monkeypatch: pytest.MonkeyPatch,
                                         capsys) -> None:
    """A person at a terminal sees what happens, not one line per job or batch."""
    monkeypatch.setenv(logs.LOG_FORMAT_ENV, chosen)
    previous = logging.getLogger().handlers[:]
    memq_logger, rq_logger = logging.getLogger("memq.test"), logging.getLogger("rq.worker")
    # RQ gives its logger a handler of its own once a worker has run in this process.
    rq_state = rq_logger.handlers[:], rq_logger.propagate, rq_logger.level
    rq_logger.handlers[:], rq_logger.propagate, rq_logger.level = [], True, logging.NOTSET
    try:
        logs.setup()
        logs.log(memq_logger, "writer started")
        logs.log_routine(memq_logger, "batch committed")
        logs.log_routine(memq_logger, "job failed", logging.WARNING)
        rq_logger.info("memq-embed: Job OK")
        rq_logger.warning("memq-embed: moving job to the failed registry")
        with logs.routine():
            logs.log(memq_logger, "embed job done")
        logs.log(memq_logger, "after the job")
    finally:
        logging.getLogger().handlers[:] = previous
        rq_logger.handlers[:], rq_logger.propagate, rq_logger.level = rq_state
    lines = capsys.readouterr().err.strip().splitlines()
    shown = [orjson.loads(line)["msg"] for line in lines] if chosen == "json" else [
        line.split(": ", 1)[1] for line in lines]
    everything = ["writer started", "batch committed", "job failed", "memq-embed: Job OK",
                  "memq-embed: moving job to the failed registry", "embed job done",
                  "after the job"]
    on_a_terminal = ["writer started", "job failed",
                     "memq-embed: moving job to the failed registry", "after the job"]
    assert shown == (everything if chosen == "json" else on_a_terminal)


@pytest.mark.parametrize(("argv", "message"), [
    (["metrics", "--port", "70000"], "a port number is from 0 to 65535, got 70000"),
    (["dashboard", "--port", "http"], "not a port number: 'http'"),
    (["demo", "--timeout", "0"], "must be a positive number of seconds, got 0"),
    (["demo", "--timeout", "soon"], "not a number of seconds: 'soon'"),
])
def test_bad_options_are_usage_errors(argv: list[str], message: str, capsys) -> None:
    from memq.cli import main

    with pytest.raises(SystemExit) as exit_info:
        main(argv)
    assert exit_info.value.code == 2
    assert message in capsys.readouterr().err


def test_metrics_port_in_use_is_a_clear_error() -> None:
    import socket

    from memq.cli.metrics import make_server
    from memq.errors import MemqError

    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        busy = taken.getsockname()[1]
        with pytest.raises(MemqError, match=f"cannot serve metrics on 127.0.0.1:{busy}"):
            make_server(config_module.Config(), "127.0.0.1", busy)


def test_up_without_redis_server_says_how_to_fix_it(tmp_path: Path) -> None:
    import os
    import subprocess
    import sys

    from tests.conftest import ROOT

    env = {k: v for k, v in os.environ.items() if k != "MEMQ_REDIS_URL"}
    env.update(PATH=str(tmp_path), PYTHONPATH=str(ROOT))
    result = subprocess.run([sys.executable, "-m", "memq", "up", "--db",
                             str(tmp_path / "data" / "memq.db")],
                            cwd=ROOT, env=env, capture_output=True, text=True, timeout=60)
    assert result.returncode == 1
    assert "redis-server is not installed" in result.stderr
    assert "MEMQ_REDIS_URL" in result.stderr
