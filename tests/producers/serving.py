"""A real ``memq serve`` for tests: the app under uvicorn in a thread, on a free port, with
each role's client on that role's own Redis credentials (the ACL users of the test Redis)."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import uvicorn

from memq import MemoryClient, RemoteMemoryClient
from memq.authority import Role
from memq.config import Config
from memq.server.app import create_app
from memq.testing import free_port
from memq.tokens import SERVED_ROLES, Tokens
from tests.producers.aio_adapter import SyncOverAsync


@dataclass(frozen=True)
class Served:
    url: str
    tokens: Tokens
    bases: dict[Role, MemoryClient]

    def token(self, role: Role = Role.AGENT) -> str:
        return self.tokens.by_role[role]


@contextmanager
def serving(config: Config, role_urls: dict[Role, str], directory: Path,
            **options: Any) -> Iterator[Served]:
    bases = {role: MemoryClient(config=config.replace(redis_url=role_urls[role]))
             for role in SERVED_ROLES}
    tokens = Tokens.in_directory(directory)
    port = free_port()
    server = uvicorn.Server(uvicorn.Config(create_app(bases, tokens, **options),
                                           host="127.0.0.1", port=port, log_level="warning"))
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    while not server.started:
        if not thread.is_alive():
            raise RuntimeError("the test server did not start")
        time.sleep(0.01)
    try:
        yield Served(f"http://127.0.0.1:{port}", tokens, bases)
    finally:
        # Not graceful: a test's clients are closed by now, and waiting out uvicorn's
        # shutdown ticks for each test adds up.
        server.should_exit = server.force_exit = True
        thread.join()
        for base in bases.values():
            base.close()


AnyClient = MemoryClient | RemoteMemoryClient
KINDS = ("local", "remote", "async")
"""Every client a test marked ``remote_too`` runs with (``async``: AsyncMemoryClient)."""

LOCAL_KINDS = ("local", "async")
"""The clients every other test of a client runs with."""


LOCAL_CLIENTS: dict[str, Any] = {"local": MemoryClient, "async": SyncOverAsync}
"""The class of each local kind (the async client through a blocking test adapter)."""


@contextmanager
def client_of(request: pytest.FixtureRequest, kind: str, role: Role | None = None
              ) -> Iterator[Any]:
    """A local client, sync or async (the test Redis' default user, or ``role``'s
    credentials), or a remote one with the token of the same role, on the test's
    ``memq serve``."""
    if kind in LOCAL_KINDS:
        config: Config = request.getfixturevalue("config")
        if role is not None:
            config = config.replace(redis_url=request.getfixturevalue("role_urls")[role])
        with LOCAL_CLIENTS[kind](config=config) as local:
            yield local
        return
    served: Served = request.getfixturevalue("served")
    with RemoteMemoryClient(served.url, token=served.token(role or Role.ADMIN)) as remote:
        yield remote
