"""``AsyncRemoteMemoryClient``: :class:`~memq.producers.remote.RemoteMemoryClient` for
asyncio, on :class:`httpx.AsyncClient` (native: no thread per call)::

    from memq import AsyncRemoteMemoryClient

    async with AsyncRemoteMemoryClient("http://127.0.0.1:8420", token=token) as m:
        await m.append("s1", "user", "hello")
        await m.flush()
        items = await m.get_context("s1", "greeting")

Every method is the sync client's, awaited; the requests and answers are the same
(:mod:`memq.producers.remote_calls`).
"""

from __future__ import annotations

import uuid
from collections.abc import AsyncIterator, Awaitable, Mapping, Sequence
from contextlib import asynccontextmanager
from datetime import datetime
from typing import Any

import httpx

from memq.authority import Role
from memq.producers import remote_calls as calls
from memq.producers.context import ContextItem
from memq.producers.documents import FoundDocument
from memq.producers.macros import MacroSuggestion
from memq.producers.prefixes import AllowedPrefix
from memq.producers.remote import headers, unreachable
from memq.store.read.documents import Document
from memq.store.read.facts import Fact, FactChange
from memq.store.read.messages import Message
from memq.store.read.sessions import SessionInfo
from memq.store.read.tasks import Task

__all__ = ["AsyncRemoteMemoryClient"]


class AsyncRemoteMemoryClient:
    """A handle on a memq server for coroutines of one event loop."""

    def __init__(self, base_url: str, *, token: str,
                 timeout: float = calls.DEFAULT_TIMEOUT_S, verify: Any = True) -> None:
        self.base_url = base_url.rstrip("/")
        self.client_id = uuid.uuid4().hex
        self.timeout = timeout
        self.http = httpx.AsyncClient(base_url=self.base_url, verify=verify,
                                      headers=headers(token, self.client_id))
        self._role: Role | None = None
        self._sent = calls.Sent()

    async def aclose(self) -> None:
        await self.http.aclose()

    async def __aenter__(self) -> AsyncRemoteMemoryClient:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.aclose()

    async def _run(self, call: calls.Call) -> Any:
        try:
            answer = await self.http.request(call.method, call.path, content=call.content(),
                                       timeout=self.timeout + call.waits_s)
        except httpx.HTTPError as exc:
            raise unreachable(self.base_url, exc) from exc
        self._sent.note(answer.headers.get(calls.SENT_HEADER))
        return call.result(answer.status_code, answer.content)

    @property
    def role(self) -> Awaitable[Role]:
        """The role of this client's token (agent or admin): ``await client.role``, as
        :class:`AsyncMemoryClient`'s."""
        return self._whoami()

    async def _whoami(self) -> Role:
        if self._role is None:
            self._role = Role(await self._run(calls.whoami()))
        return self._role

    # -- turns -------------------------------------------------------------------------------

    async def append(self, session_id: str, role: str, content: str, *,
               importance: float | None = None, tool_call_id: str | None = None,
               tool_name: str | None = None, tool_calls: list[Any] | None = None,
               created_at: datetime | str | None = None, user_id: str | None = None,
               agent_id: str | None = None) -> str:
        result: str = await self._run(calls.append(
            session_id=session_id, role=role, content=content, importance=importance,
            tool_call_id=tool_call_id, tool_name=tool_name, tool_calls=tool_calls,
            created_at=created_at, user_id=user_id, agent_id=agent_id))
        return result

    async def append_many(self, turns: Sequence[Mapping[str, Any]]) -> list[str]:
        result: list[str] = await self._run(calls.append_many(turns))
        return result

    @asynccontextmanager
    async def batched(self) -> AsyncIterator[AsyncRemoteMemoryClient]:
        """Accepted for the local client's sake; each call is still its own request (use
        :meth:`append_many` to send many turns in one)."""
        yield self

    async def flush(self, timeout: float = 10.0) -> None:
        await self._run(calls.flush(timeout, self._sent))

    async def get_context(self, session_id: str, query: str | None = None,
                    scope: str = "session") -> list[ContextItem]:
        result: list[ContextItem] = await self._run(calls.get_context(session_id, query, scope))
        return result

    async def history(self, session_id: str, limit: int = 50, *, before: str | None = None,
                      after: str | None = None, summaries: bool = True) -> list[Message]:
        result: list[Message] = await self._run(
            calls.history(session_id, limit, before, after, summaries))
        return result

    async def sessions(self, user_id: str | None = None, agent_id: str | None = None, *,
                 limit: int = 50, before: datetime | str | None = None) -> list[SessionInfo]:
        result: list[SessionInfo] = await self._run(
            calls.sessions(user_id, agent_id, limit, before))
        return result

    async def forget_session(self, session_id: str) -> str:
        result: str = await self._run(calls.forget_session(session_id))
        return result

    async def forget_message(self, session_id: str, message_id: str) -> str:
        result: str = await self._run(calls.forget_message(session_id, message_id))
        return result

    async def forget_user(self, user_id: str) -> str:
        result: str = await self._run(calls.forget_user(user_id))
        return result

    async def wait_forgotten(self, event_id: str, timeout: float = 30.0) -> dict[str, Any]:
        result: dict[str, Any] = await self._run(
            calls.wait_forgotten(event_id, timeout, self._sent))
        return result

    # -- facts -------------------------------------------------------------------------------

    async def set_fact(self, category: str, key: str, value: str, source: str = "agent", *,
                 force: bool = False, user_id: str | None = None) -> str:
        result: str = await self._run(calls.set_fact(category, key, value, source, force, user_id))
        return result

    async def delete_fact(self, category: str, key: str, source: str = "agent", *,
                    force: bool = False, user_id: str | None = None) -> str:
        result: str = await self._run(calls.delete_fact(category, key, source, force, user_id))
        return result

    async def facts(self, category: str | None = None, *, user_id: str | None = None) -> list[Fact]:
        result: list[Fact] = await self._run(calls.facts(category, user_id))
        return result

    async def fact_history(self, category: str, key: str, *,
                     user_id: str | None = None) -> list[FactChange]:
        result: list[FactChange] = await self._run(calls.fact_history(category, key, user_id))
        return result

    # -- documents ---------------------------------------------------------------------------

    async def put_document(self, namespace: tuple[str, ...] | list[str], key: str,
                     value: dict[str, Any], *, text: str | None = None,
                     ttl_minutes: float | None = None, user_id: str | None = None) -> str:
        result: str = await self._run(calls.put_document(namespace, key, value, text, ttl_minutes,
                                                      user_id))
        return result

    async def delete_document(self, namespace: tuple[str, ...] | list[str], key: str, *,
                        user_id: str | None = None) -> str:
        result: str = await self._run(calls.change_document("delete", namespace, key, user_id))
        return result

    async def touch_document(self, namespace: tuple[str, ...] | list[str], key: str, *,
                       user_id: str | None = None) -> str:
        result: str = await self._run(calls.change_document("touch", namespace, key, user_id))
        return result

    async def document(self, namespace: tuple[str, ...] | list[str], key: str, *,
                 user_id: str | None = None) -> Document | None:
        result: Document | None = await self._run(calls.document(namespace, key, user_id))
        return result

    async def search_documents(
        self, prefix: tuple[str, ...] | list[str] = (), *, query: str | None = None,
        filter: dict[str, Any] | None = None, limit: int = 10, offset: int = 0,
        user_id: str | None = None,
    ) -> list[FoundDocument]:
        result: list[FoundDocument] = await self._run(calls.search_documents(
            prefix, query, filter, limit, offset, user_id))
        return result

    async def document_namespaces(self, *, user_id: str | None = None) -> list[tuple[str, ...]]:
        result: list[tuple[str, ...]] = await self._run(calls.document_namespaces(user_id))
        return result

    # -- tasks -------------------------------------------------------------------------------

    async def schedule_task(self, name: str, schedule: str, prompt: str, *, oneshot: bool = False,
                      trusted: bool = False, tz: str | None = None) -> str:
        result: str = await self._run(calls.schedule_task(name, schedule, prompt, oneshot, trusted,
                                                    tz))
        return result

    async def pause_task(self, task_id: str) -> None:
        await self._run(calls.change_task(task_id, "pause"))

    async def resume_task(self, task_id: str) -> None:
        await self._run(calls.change_task(task_id, "resume"))

    async def delete_task(self, task_id: str) -> None:
        await self._run(calls.change_task(task_id, "delete"))

    async def task(self, task_id: str) -> Task:
        result: Task = await self._run(calls.task(task_id))
        return result

    async def tasks(self) -> list[Task]:
        result: list[Task] = await self._run(calls.tasks())
        return result

    # -- terminal approvals and tool macros --------------------------------------------------

    async def allow_prefix(self, command: str) -> str:
        result: str = await self._run(calls.allow_prefix(command))
        return result

    async def revoke_prefix(self, prefix: str) -> str:
        result: str = await self._run(calls.revoke_prefix(prefix))
        return result

    async def allowed_prefixes(self) -> list[AllowedPrefix]:
        result: list[AllowedPrefix] = await self._run(calls.allowed_prefixes())
        return result

    async def is_command_allowed(self, command: str, *, trusted: bool = False) -> bool:
        result: bool = await self._run(calls.is_command_allowed(command, trusted))
        return result

    async def record_tool_call(self, session_id: str, tool: str,
                         args: Mapping[str, Any] | None = None) -> str:
        result: str = await self._run(calls.record_tool_call(session_id, tool, args))
        return result

    async def suggest_next_tools(self, tool: str,
                           args: Mapping[str, Any] | None = None) -> list[MacroSuggestion]:
        result: list[MacroSuggestion] = await self._run(calls.suggest_next_tools(tool, args))
        return result

    async def use_macro(self, macro_id: int) -> str:
        result: str = await self._run(calls.use_macro(macro_id))
        return result
