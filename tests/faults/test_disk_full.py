"""The disk fills up under the writer: it stops acknowledging, says why (in its log and in
``memq status``), and once there is room again it commits everything, without a restart
and without loss.

The database lives on a small tmpfs mounted for the test; mounting needs root (or
CAP_SYS_ADMIN), and without it the test is skipped with that reason.
"""

from __future__ import annotations

import errno
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any, BinaryIO

import orjson
import pytest
import redis

from memq import MemoryClient, names
from memq.config import Config
from memq.errors import FlushTimeout
from tests.conftest import ROOT
from tests.faults import figures
from tests.faults.load import Sent, verify
from tests.faults.procs import env, start_writer, wait_until

pytestmark = [pytest.mark.faults, pytest.mark.redis, pytest.mark.slow]

DISK_BYTES = 4 * 1024 * 1024


@pytest.fixture
def small_disk(tmp_path: Path) -> Iterator[Path]:
    mount = tmp_path / "disk"
    mount.mkdir()
    done = subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={DISK_BYTES},mode=0700",
                           "tmpfs", str(mount)], capture_output=True, text=True, check=False)
    if done.returncode != 0:
        pytest.skip(f"cannot mount a small tmpfs here (needs root): {done.stderr.strip()}")
    try:
        yield mount
    finally:
        subprocess.run(["umount", "-l", str(mount)], check=False)


def fill(directory: Path) -> Path:
    """Write a ballast file until the file system refuses another byte."""
    ballast = directory / "ballast"
    with ballast.open("wb", buffering=0) as out:
        for size in (65536, 512):  # big chunks, then the last partial page
            assert _write_until_refused(out, size) == errno.ENOSPC
    return ballast


def _write_until_refused(out: BinaryIO, size: int) -> int | None:
    try:
        while True:
            out.write(b"\0" * size)
    except OSError as exc:
        return exc.errno


def test_a_full_disk_stalls_the_writer_until_there_is_room(
    small_disk: Path, config: Config, tmp_path: Path
) -> None:
    config = config.replace(db_path=str(small_disk / "memq.db"))
    broker = redis.Redis.from_url(config.redis_url)
    writer = start_writer(config, tmp_path / "writer.log")
    sent = Sent()
    try:
        with MemoryClient(config=config) as client:
            client.append("s1", "user", "before the disk filled")
            client.flush(60)
            ballast = fill(small_disk)
            with client.batched():
                for i in range(300):
                    content = f"turn {i}: " + "words that need room " * 20
                    sent.appends[client.append("s1", "user", content)] = content
            with pytest.raises(FlushTimeout):
                client.flush(3)
            wait_until(lambda: broker.exists(names.WRITER_STALLED_KEY), "the stall report")
            assert writer.alive
            status, text = _status(config, "--json"), _status(config)
            ballast.unlink()
            client.flush(60)  # the writer retries on its own and commits the backlog
            assert not broker.exists(names.WRITER_STALLED_KEY)
    finally:
        assert writer.terminate() == 0, writer.output()[-2000:]
    sent.appends.update(_first_message(config))
    verdict = verify(config, sent)
    figures.add("disk_full")
    figures.add("appends", len(sent.appends))
    figures.add("events", sent.events)
    figures.add("lost", len(verdict.lost))
    figures.add("duplicated", verdict.duplicated)
    assert "cannot commit: the disk or the database is full" in status["writer"]["stalled"]
    assert status["writer"]["alive"]
    assert "STALLED since" in text
    assert status["inbox"]["pending"] + status["inbox"]["lag"] >= 300  # nothing acknowledged
    assert "the disk or the database is full" in writer.output()
    assert "Traceback" not in writer.output()
    assert verdict.lost == []
    assert verdict.problems == []


def _status(config: Config, *options: str) -> Any:
    done = subprocess.run(
        [sys.executable, "-m", "memq", "status", *options, "--db", config.db_path,
         "--redis-url", config.redis_url],
        cwd=ROOT, env=env(), capture_output=True, text=True, check=False, timeout=60)
    return orjson.loads(done.stdout) if options else done.stdout


def _first_message(config: Config) -> dict[str, str]:
    with MemoryClient(config=config) as client:
        return {m.id: m.content for m in client.history("s1", 10_000)
                if m.content == "before the disk filled"}
