"""A real ``memq serve`` with its console, and its writer."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from memq.authority import Role
from memq.config import Config
from memq.testing import WriterThread
from tests.producers.serving import Served, serving


@pytest.fixture
def served(config: Config, role_urls: dict[Role, str], writer: WriterThread,
           tmp_path: Path) -> Iterator[Served]:
    # Keys read afresh on every call: a revocation is seen at once, and no test waits.
    with serving(config, role_urls, tmp_path, key_ttl_s=0.0) as running:
        yield running
