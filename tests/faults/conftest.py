"""Fixtures of the fault suite, and the summary of its figures at the end of the run."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from memq.testing import RedisServer
from tests.faults import figures


@pytest.fixture
def aof_redis(tmp_path: Path) -> Iterator[RedisServer]:
    """A private redis-server with an append-only file, for tests that restart it."""
    directory = tmp_path / "redis"
    directory.mkdir()
    server = RedisServer(directory, appendonly=True)
    server.start()
    yield server
    server.stop()


def pytest_terminal_summary(terminalreporter: Any) -> None:
    summary = figures.lines()
    if summary:
        terminalreporter.section("memq reliability figures")
        for line in summary:
            terminalreporter.write_line(line)
