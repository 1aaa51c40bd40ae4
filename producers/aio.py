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
from collections.abc import AsyncIterator, Awaitable, Mapping, Sequence
from contextlib import asynccontextmanager
from contextvars import ContextVar
from datetime import datetime
from typing import Any, Self, TypeVar

from memq import broker
from memq.authority import Role
from memq.config import Config
from memq.errors import BrokerError, EventsRejected
from memq.producers import ops
from memq.producers.aio_outbox import AsyncOutbox
from memq.producers.context import ContextItem
from memq.producers.documents import DocumentsOps, FoundDocument
from memq.producers.facts import FactsOps
from memq.producers.identity import AsyncDatabaseCheck
from memq.producers.macros import MacrosOps, MacroSuggestion
from memq.producers.mixin import settings, settings_of_role
from memq.producers.ops import Op, Request, drive_async
from memq.producers.outbox import Position
from memq.producers.pending import PendingWrites
from memq.producers.prefixes import AllowedPrefix, PrefixesOps
from memq.producers.sessions import SessionsOps
from memq.producers.tasks import TasksOps
from memq.producers.turns import TurnsOps
from memq.store.read.documents import Document
from memq.store.read.facts import Fact, FactChange
from memq.store.read.messages import Message
from memq.store.read.pool import ReadPool
from memq.store.read.sessions import SessionInfo
from memq.store.read.tasks import Task

__all__ = ["AsyncMemoryClient"]

T = TypeVar("T")

_COMMIT_POSITION: ContextVar[Position | None] = ContextVar("memq_commit_position",
                                                           default=None)
"""The commit position read on the loop for the ``Run`` work of this task (the worker
thread sees it: ``asyncio.to_thread`` copies the context)."""


class AsyncMemoryClient(
    TurnsOps, SessionsOps, FactsOps, MacrosOps, PrefixesOps, TasksOps, DocumentsOps,
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

    # -- turns --------------------------------------------------------------------------

    async def append(
        self, session_id: str, role: str, content: str, *, importance: float | None = None,
        tool_call_id: str | None = None, tool_name: str | None = None,
        tool_calls: list[Any] | None = None, created_at: datetime | str | None = None,
        user_id: str | None = None, agent_id: str | None = None,
    ) -> str:
        """Record one conversation turn; returns its message id without waiting."""
        return await self._run(self._append_op(
            session_id, role, content, importance=importance, tool_call_id=tool_call_id,
            tool_name=tool_name, tool_calls=tool_calls, created_at=created_at,
            user_id=user_id, agent_id=agent_id))

    async def append_many(self, turns: Sequence[Mapping[str, Any]]) -> list[str]:
        """Record many turns in one round trip; every turn is checked before any is sent."""
        return await self._run(self._append_many_op(turns))

    @asynccontextmanager
    async def batched(self) -> AsyncIterator[Self]:
        """Pipeline many writes into few round trips (imports, bulk loads)."""
        async with self.outbox.batched():
            yield self

    async def flush(self, timeout: float = 10.0) -> None:
        """Return once everything this client sent is committed; ``EventsRejected`` if the
        writer rejected any of it, ``FlushTimeout`` after ``timeout`` seconds. Cancelling
        it loses nothing that was sent."""
        try:
            await self.outbox.flush(timeout)
        except EventsRejected as exc:
            self._forget_rejected(exc)
            raise

    async def history(self, session_id: str, limit: int = 50, *, before: str | None = None,
                      after: str | None = None, summaries: bool = True) -> list[Message]:
        """A page of a session's messages, oldest first (see ``MemoryClient.history``)."""
        return await self._run(self._history_op(session_id, limit, before, after, summaries))

    async def get_context(self, session_id: str, query: str | None = None,
                          scope: str = "session") -> list[ContextItem]:
        """The session's context (see ``MemoryClient.get_context``)."""
        return await self._run(self._get_context_op(session_id, query, scope))

    # -- sessions -----------------------------------------------------------------------

    async def sessions(self, user_id: str | None = None, agent_id: str | None = None, *,
                       limit: int = 50, before: datetime | str | None = None
                       ) -> list[SessionInfo]:
        return await self._run(self._sessions_op(user_id, agent_id, limit, before))

    async def forget_session(self, session_id: str) -> str:
        return await self._run(self._forget_session_op(session_id))

    async def forget_message(self, session_id: str, message_id: str) -> str:
        return await self._run(self._forget_message_op(session_id, message_id))

    async def forget_user(self, user_id: str) -> str:
        return await self._run(self._forget_user_op(user_id))

    async def wait_forgotten(self, event_id: str, timeout: float = 30.0) -> dict[str, Any]:
        return await self._run(self._wait_forgotten_op(event_id, timeout))

    # -- facts --------------------------------------------------------------------------

    async def set_fact(self, category: str, key: str, value: str, source: str = "agent", *,
                       force: bool = False, user_id: str | None = None) -> str:
        return await self._run(self._set_fact_op(category, key, value, source, force=force,
                                                 user_id=user_id))

    async def delete_fact(self, category: str, key: str, source: str = "agent", *,
                          force: bool = False, user_id: str | None = None) -> str:
        return await self._run(self._delete_fact_op(category, key, source, force=force,
                                                    user_id=user_id))

    async def facts(self, category: str | None = None, *, user_id: str | None = None
                    ) -> list[Fact]:
        return await self._run(self._facts_op(category, user_id))

    async def fact_history(self, category: str, key: str, *, user_id: str | None = None
                           ) -> list[FactChange]:
        return await self._run(self._fact_history_op(category, key, user_id))

    # -- tool macros --------------------------------------------------------------------

    async def record_tool_call(self, session_id: str, tool: str,
                               args: Mapping[str, Any] | None = None) -> str:
        return await self._run(self._record_tool_call_op(session_id, tool, args))

    async def suggest_next_tools(self, tool: str, args: Mapping[str, Any] | None = None
                                 ) -> list[MacroSuggestion]:
        return await self._run(self._suggest_next_tools_op(tool, args))

    async def use_macro(self, macro_id: int) -> str:
        return await self._run(self._use_macro_op(macro_id))

    # -- terminal approvals -------------------------------------------------------------

    async def allow_prefix(self, command: str) -> str:
        return await self._run(self._allow_prefix_op(command))

    async def revoke_prefix(self, prefix: str) -> str:
        return await self._run(self._revoke_prefix_op(prefix))

    async def allowed_prefixes(self) -> list[AllowedPrefix]:
        return await self._run(self._allowed_prefixes_op())

    async def is_command_allowed(self, command: str, *, trusted: bool = False) -> bool:
        return await self._run(self._is_command_allowed_op(command, trusted))

    # -- scheduled tasks ----------------------------------------------------------------

    async def schedule_task(self, name: str, schedule: str, prompt: str, *,
                            oneshot: bool = False, trusted: bool = False,
                            tz: str | None = None) -> str:
        return await self._run(self._schedule_task_op(name, schedule, prompt,
                                                      oneshot=oneshot, trusted=trusted, tz=tz))

    async def pause_task(self, task_id: str) -> None:
        await self._run(self._pause_task_op(task_id))

    async def resume_task(self, task_id: str) -> None:
        await self._run(self._resume_task_op(task_id))

    async def delete_task(self, task_id: str) -> None:
        await self._run(self._delete_task_op(task_id))

    async def task(self, task_id: str) -> Task:
        return await self._run(self._task_op(task_id))

    async def tasks(self) -> list[Task]:
        return await self._run(self._tasks_op())

    # -- documents ----------------------------------------------------------------------

    async def put_document(
        self, namespace: tuple[str, ...] | list[str], key: str, value: dict[str, Any], *,
        text: str | None = None, ttl_minutes: float | None = None, user_id: str | None = None,
    ) -> str:
        return await self._run(self._put_document_op(
            namespace, key, value, text=text, ttl_minutes=ttl_minutes, user_id=user_id))

    async def delete_document(self, namespace: tuple[str, ...] | list[str], key: str, *,
                              user_id: str | None = None) -> str:
        return await self._run(self._delete_document_op(namespace, key, user_id))

    async def touch_document(self, namespace: tuple[str, ...] | list[str], key: str, *,
                             user_id: str | None = None) -> str:
        return await self._run(self._touch_document_op(namespace, key, user_id))

    async def document(self, namespace: tuple[str, ...] | list[str], key: str, *,
                       user_id: str | None = None) -> Document | None:
        return await self._run(self._document_op(namespace, key, user_id))

    async def search_documents(
        self, prefix: tuple[str, ...] | list[str] = (), *, query: str | None = None,
        filter: dict[str, Any] | None = None, limit: int = 10, offset: int = 0,
        user_id: str | None = None,
    ) -> list[FoundDocument]:
        return await self._run(self._search_documents_op(prefix, query, filter, limit,
                                                         offset, user_id))

    async def document_namespaces(self, *, user_id: str | None = None
                                  ) -> list[tuple[str, ...]]:
        return await self._run(self._document_namespaces_op(user_id))
