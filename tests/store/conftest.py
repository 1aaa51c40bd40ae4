"""What the store's tests share: a database driven through the writer's own batch code."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.store.eventlog import EventLog


@pytest.fixture
def log(tmp_path: Path) -> Iterator[EventLog]:
    """A fresh database in ``tmp_path``, fed through the writer's batches (no Redis)."""
    opened = EventLog(tmp_path)
    yield opened
    opened.close()
