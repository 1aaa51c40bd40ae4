"""Real memq processes for fault tests: started, waited on, killed; their logs kept on disk.

Logs go to files, not pipes: a writer logs a line per batch, and a pipe nobody reads
would fill up and stall it, which is not the fault under test.
"""

from __future__ import annotations

import os
import signal
import subprocess
import time
from collections.abc import Callable
from pathlib import Path

import pytest
import redis

from memq import names
from memq.config import Config
from tests.conftest import MODEL_DIR, ROOT, memq_command


def env() -> dict[str, str]:
    return {**os.environ, "PYTHONPATH": str(ROOT), "MEMQ_EMBED_MODEL_DIR": str(MODEL_DIR),
            "MEMQ_LOG_FORMAT": "json"}


class Proc:
    """One ``memq ...`` process with its output in ``log``."""

    def __init__(self, log: Path, *args: str, config_file: Path | None = None) -> None:
        self.log = log
        extra = ("--config", str(config_file)) if config_file else ()
        with log.open("ab") as out:
            self.popen = subprocess.Popen(memq_command(*args, *extra), cwd=ROOT, env=env(),
                                          stdout=out, stderr=subprocess.STDOUT)
        _started.append(self)

    @property
    def alive(self) -> bool:
        return self.popen.poll() is None

    def kill(self) -> bool:
        """SIGKILL; True if it was still running (a kill it had to survive)."""
        was_alive = self.alive
        self.popen.send_signal(signal.SIGKILL)
        self.popen.wait(30)
        return was_alive

    def terminate(self) -> int:
        if self.alive:
            self.popen.send_signal(signal.SIGTERM)
        return self.popen.wait(60)

    def output(self) -> str:
        return self.log.read_text(errors="replace")


_started: list[Proc] = []


def kill_leftovers() -> None:
    """SIGKILL every process a test started and left running (it failed half-way)."""
    while _started:
        proc = _started.pop()
        if proc.alive:
            proc.kill()


def start_writer(config: Config, log: Path, config_file: Path | None = None) -> Proc:
    return Proc(log, "writer", "--db", config.db_path, "--redis-url", config.redis_url,
                config_file=config_file)


def wait_until(condition: Callable[[], bool], what: str, timeout: float = 60.0,
               state: Callable[[], str] | None = None) -> None:
    """Poll for what another process brings about; fail naming ``what`` if it never comes,
    with what ``state()`` says about the world then (a failure on CI is all one gets)."""
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > deadline:
            detail = f"\n{state()}" if state is not None else ""
            pytest.fail(f"gave up after {timeout:g} s waiting for {what}{detail}")
        time.sleep(0.01)


def committed(broker: redis.Redis) -> tuple[tuple[int, int], ...]:
    """The commit position of each inbox stream; each only moves forward, so any change
    means the writer committed something."""
    return tuple(position(v) for v in broker.mget(list(names.COMMITTED_KEYS.values())))


def position(stream_id: bytes | None) -> tuple[int, int]:
    if stream_id is None:
        return (0, 0)
    ms, _, seq = stream_id.partition(b"-")
    return int(ms), int(seq or 0)
