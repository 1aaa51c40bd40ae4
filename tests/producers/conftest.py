"""Fixtures shared by the agent-side tests."""

from __future__ import annotations

import dataclasses
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from memq import MemoryClient, RemoteMemoryClient
from memq.authority import Role
from memq.config import Config
from memq.embedding import Embedder
from memq.testing import WriterThread
from tests.conftest import MODEL_DIR
from tests.producers.serving import (
    KINDS,
    LOCAL_CLIENTS,
    LOCAL_KINDS,
    Served,
    client_of,
    serving,
)


def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    """A test of a client runs once per kind of client: its ``client`` (and the ``agent``
    / ``admin`` of the permission tests, ``idle_client``, ``make_client``) is a
    MemoryClient, then an AsyncMemoryClient (through a blocking adapter), and, for a test
    marked ``remote_too``, a RemoteMemoryClient of the same role through a real
    ``memq serve``."""
    if "client_kind" not in metafunc.fixturenames:
        return
    remote = metafunc.definition.get_closest_marker("remote_too") is not None
    metafunc.parametrize("client_kind", KINDS if remote else LOCAL_KINDS)


@pytest.fixture
def client_kind() -> str:
    return "local"


@pytest.fixture
def client(request: pytest.FixtureRequest, client_kind: str, writer: WriterThread
           ) -> Iterator[MemoryClient]:
    """The test's client with a writer running: local (the default user: admin rights), or
    remote with the admin token for tests marked ``remote_too``."""
    with client_of(request, client_kind) as memory:
        yield memory


@pytest.fixture
def idle_client(request: pytest.FixtureRequest, client_kind: str, config: Config
                ) -> Iterator[MemoryClient]:
    """A client with no writer running: bad calls must fail before anything is sent
    (remote, for tests marked ``remote_too``: a server with no writer behind it)."""
    if client_kind in LOCAL_KINDS:
        with LOCAL_CLIENTS[client_kind](config=config) as memory:
            yield memory
        return
    role_urls = request.getfixturevalue("role_urls")
    with serving(config, role_urls, request.getfixturevalue("tmp_path")) as idle, \
            RemoteMemoryClient(idle.url, token=idle.token(Role.ADMIN)) as remote:
        yield remote  # type: ignore[misc]


@pytest.fixture
def make_client(client_kind: str) -> Any:
    """The class of this run's local client, for tests that make their own
    (``make_client(config=...)``)."""
    return LOCAL_CLIENTS[client_kind]


@pytest.fixture(scope="module")
def embedder() -> Embedder:
    """The real model, loaded once per test module."""
    shared = Embedder(dataclasses.replace(Config().embed, model_dir=str(MODEL_DIR)))
    shared.load()
    return shared


@pytest.fixture
def clients(config: Config, writer: WriterThread) -> Iterator[list[MemoryClient]]:
    """Clients a test opens (append to the list); all closed afterwards."""
    opened: list[MemoryClient] = []
    yield opened
    for client in opened:
        client.close()


@pytest.fixture
def served(config: Config, role_urls: dict[Role, str], writer: WriterThread,
           tmp_path: Path) -> Iterator[Served]:
    """``memq serve`` on a free port, over the test database and Redis, a writer running."""
    with serving(config, role_urls, tmp_path) as running:
        yield running
