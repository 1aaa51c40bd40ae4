"""A real ``memq serve`` for the adapters' tests with a remote client."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from memq import RemoteMemoryClient
from memq.authority import Role
from memq.config import Config
from memq.testing import WriterThread
from tests.producers.serving import serving


@pytest.fixture
def remote(config: Config, role_urls: dict[Role, str], writer: WriterThread,
           tmp_path: Path) -> Iterator[RemoteMemoryClient]:
    """An agent's RemoteMemoryClient on ``memq serve`` over the test database and Redis."""
    with serving(config, role_urls, tmp_path) as served, \
            RemoteMemoryClient(served.url, token=served.token(Role.AGENT)) as client:
        yield client
