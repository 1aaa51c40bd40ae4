"""Fixtures shared by the agent-side tests."""

from __future__ import annotations

import dataclasses
from collections.abc import Iterator

import pytest

from memq.config import Config
from memq.embedding import Embedder
from producers import MemoryClient
from tests.conftest import MODEL_DIR, WriterThread


@pytest.fixture
def idle_client(config: Config) -> Iterator[MemoryClient]:
    """A client with no writer running: bad calls must fail before anything is sent."""
    with MemoryClient(config=config) as memory:
        yield memory


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
