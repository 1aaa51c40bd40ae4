"""A real ``memq serve`` with keys read afresh on every call, and the person's client."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from memq import RemoteMemoryClient
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


@pytest.fixture
def admin(served: Served) -> Iterator[RemoteMemoryClient]:
    with RemoteMemoryClient(served.url, token=served.token(Role.ADMIN)) as client:
        client.append("bob-chat", "user", "bob's secret plan", user_id="bob", agent_id="a1")
        client.set_fact("diet", "likes", "figs", user_id="bob")
        client.schedule_task("standup", "every weekday at 9am", "post it")
        client.flush()
        yield client


def key_for(admin: RemoteMemoryClient, served: Served, **grant: object) -> RemoteMemoryClient:
    made = admin.create_key("test", **grant)  # type: ignore[arg-type]
    admin.flush()
    return RemoteMemoryClient(served.url, token=made.secret)


