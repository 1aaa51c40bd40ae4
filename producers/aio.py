"""``AsyncMemoryClient``: :class:`~producers.client.MemoryClient` for agents written with asyncio.

The same methods, arguments, results and errors, as coroutines. It runs the very
operations the sync client runs (``producers/ops.py``), with its own driver:

- Redis through redis.asyncio: sending events, ``flush`` waiting for the writer's commit
  and collecting its rejections, the commit position, which role the credentials hold,
  which database the Redis belongs to. The event loop never waits on Redis.
- SQLite in a worker thread (``asyncio.to_thread``): apsw has no async API, and a read is
  not always short enough to run on the loop — a history page of long tool outputs, a
  sessions page of thousands, a vector cache catching up, a reader waiting for a free
  pooled connection. ``get_context`` is one piece of work in one thread: its reads and the
  query's embedding (CPU-bound; the model releases the GIL while it computes).

Work that needs the writer's commit position inside a thread gets it read on the loop just
before (``Run.with_position``), so no thread ever talks to Redis.
"""

from __future__ import annotations

import asyncio
import os
from collections.abc import AsyncIterator, Awaitable
from contextlib import asynccontextmanager
from contextvars import ContextVar
from typing import Any, Self, TypeVar

from memq import broker
from memq.authority import Role
from memq.config import Config
from memq.errors import BrokerError
from memq.producers import ops
from memq.producers.aio_outbox import AsyncOutbox
from memq.producers.changes import ChangesOps
from memq.producers.documents import DocumentsOps
from memq.producers.facts import FactsOps
from memq.producers.identity import AsyncDatabaseCheck
from memq.producers.macros import MacrosOps
from memq.producers.mixin import operation, settings, settings_of_role
from memq.producers.ops import Op, Request, drive_async
from memq.producers.outbox import Position
from memq.producers.pending import PendingWrites
from memq.producers.prefixes import PrefixesOps
from memq.producers.rejected import RejectedOps
from memq.producers.sessions import SessionsOps
from memq.producers.surface_async import AsyncSurface
from memq.producers.tasks import TasksOps
from memq.producers.turns import TurnsOps
from memq.producers.webhooks import WebhooksOps
from memq.store.read.pool import ReadPool

__all__ = ["AsyncMemoryClient"]

T = TypeVar("T")

_COMMIT_POSITION: ContextVar[Position | None] = ContextVar("memq_commit_position",
                                                           default=None)
"""The commit position read on the loop for the ``Run`` work of this task (the worker
thread sees it: ``asyncio.to_thread`` copies the context)."""


class AsyncMemoryClient(
    TurnsOps, SessionsOps, FactsOps, MacrosOps, PrefixesOps, TasksOps, DocumentsOps, WebhooksOps,
    RejectedOps, ChangesOps,
    AsyncSurface,
):
    """One asyncio agent's handle on memq; share it between the tasks of one event loop."""

    def __init__(
        self,
        redis_url: str | None = None,
        db_path: str | os.PathLike[str] | None = None,
        *,
        config: Config | None = None,
    ) -> None:
        self.config = settings(redis_url, db_path, config)
        url = self.config.redis_url
        # As the sync client: one immediate retry; the outbox retries a restart.
        self.redis = broker.connect_async(self.config, retries=1)
        client = self.config.client
        self.outbox = AsyncOutbox(self.redis, url, retry_for_s=client.retry_for_s,
                                  max_event_bytes=self.config.limits.max_payload_bytes,
                                  wait_replicas=client.wait_replicas,
                                  wait_timeout_s=client.wait_timeout_s)
        self._database_check = AsyncDatabaseCheck(self.redis, url, self.config.db_path)
        self.readers = ReadPool(self.config.db_path, empty_until_ready=True,
                                vet=self._database_check)
        self.pending_writes = PendingWrites(self._commit_position)
        self._setup_context()

    @classmethod
    def from_env(cls, role: str = Role.AGENT) -> AsyncMemoryClient:
        """The Redis and database the ``memq`` commands use: see ``MemoryClient.from_env``."""
        return cls(config=settings_of_role(role))

    async def aclose(self) -> None:
        self.readers.close()
        await self.redis.aclose()

    async def __aenter__(self) -> Self:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.aclose()

    @property
    def role(self) -> Awaitable[Role]:
        """``await client.role``: the role Redis says these credentials hold."""
        return self.outbox.resolve_role("asking Redis who this client is")

    # -- the driver ---------------------------------------------------------------------

    def _run(self, op: Op[T]) -> Awaitable[T]:
        return drive_async(op, self._answer)

    async def _answer(self, request: Request) -> Any:
        match request:
            case ops.Send(event):
                return await self.outbox.send(event)
            case ops.SendMany(events):
                return await self.outbox.send_many(events)
            case ops.AskRole(action):
                return await self.outbox.resolve_role(action)
            case ops.AskPosition():
                return await self._read_position()
            case ops.Read(fn, args):
                await self._database_check.prepare()
                return await asyncio.to_thread(self._read, fn, args)
            case ops.Run(fn, args, with_position):
                return await self._in_thread(fn, args, with_position)
            case ops.Flush(timeout):
                return await self.outbox.flush(timeout)
            case ops.Fetch(key, action):
                with broker.translated(self.config.redis_url, action):
                    return await self.redis.get(key)
            case ops.Sleep(seconds):
                return await asyncio.sleep(seconds)
        raise TypeError(f"unknown request {request!r}")

    def _read(self, fn: Any, args: tuple[Any, ...]) -> Any:
        with self.readers.connection() as conn:
            return fn(conn, *args)

    async def _in_thread(self, fn: Any, args: tuple[Any, ...], with_position: bool) -> Any:
        await self._database_check.prepare()
        position = await self._read_position() if with_position else None
        token = _COMMIT_POSITION.set(position)
        try:
            return await asyncio.to_thread(fn, *args)
        finally:
            _COMMIT_POSITION.reset(token)

    async def _read_position(self) -> Position | None:
        """The writer's commit position, or None while Redis cannot tell (reads go on)."""
        try:
            return await self.outbox.committed()
        except BrokerError:
            return None

    def _commit_position(self) -> Position | None:
        # Called from inside a Run's thread (working memory): what the loop read for it.
        return _COMMIT_POSITION.get()

    async def _call(self, name: str, arguments: dict[str, Any]) -> Any:
        """The transport of :class:`~memq.producers.surface_async.AsyncSurface`."""
        return await self._run(operation(self, name, arguments))

    @asynccontextmanager
    async def batched(self) -> AsyncIterator[Self]:
        """Pipeline many writes into few round trips (imports, bulk loads)."""
        async with self.outbox.batched():
            yield self
