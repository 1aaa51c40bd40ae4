"""``RemoteMemoryClient``: :class:`~memq.producers.client.MemoryClient`'s methods over HTTP,
against ``memq serve`` (an agent on another host, or without the SQLite file)::

    from memq import RemoteMemoryClient

    with RemoteMemoryClient("http://127.0.0.1:8420", token=open("data/agent.token").read()) as m:
        m.append("s1", "user", "hello")
        m.flush()
        items = m.get_context("s1", "greeting")

Same arguments, same result types (:class:`ContextItem`, :class:`Message`, :class:`Task`...),
same errors (the server's problem details are raised as the :mod:`memq.errors` class they
name). Each client sends its own id, so its :meth:`flush` waits for what *it* appended and
raises *its* rejections. What a remote client cannot do: ``batched()`` (use
:meth:`append_many`), and reading the database or Redis directly.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from datetime import datetime
from typing import Any

import httpx

from memq.authority import Role
from memq.errors import BrokerError
from memq.producers import remote_calls as calls
from memq.producers.context import ContextItem
from memq.producers.documents import FoundDocument
from memq.producers.macros import MacroSuggestion
from memq.producers.prefixes import AllowedPrefix
from memq.store.read.documents import Document
from memq.store.read.facts import Fact, FactChange
from memq.store.read.messages import Message
from memq.store.read.sessions import SessionInfo
from memq.store.read.tasks import Task

__all__ = ["RemoteMemoryClient"]


def headers(token: str, client_id: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {token.strip()}", calls.CLIENT_ID_HEADER: client_id,
            "Content-Type": "application/json"}


def unreachable(base_url: str, exc: httpx.HTTPError) -> BrokerError:
    return BrokerError(f"memq serve at {base_url} did not answer: {type(exc).__name__}: {exc}")


class RemoteMemoryClient:
    """A handle on a memq server; thread-safe (httpx's connection pool)."""

    def __init__(self, base_url: str, *, token: str,
                 timeout: float = calls.DEFAULT_TIMEOUT_S, verify: Any = True) -> None:
        self.base_url = base_url.rstrip("/")
        self.client_id = uuid.uuid4().hex
        self.timeout = timeout
        self.http = httpx.Client(base_url=self.base_url, verify=verify,
                                 headers=headers(token, self.client_id))
        self._role: Role | None = None
        self._sent = calls.Sent()

    def close(self) -> None:
        self.http.close()

    def __enter__(self) -> RemoteMemoryClient:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def _run(self, call: calls.Call) -> Any:
        try:
            answer = self.http.request(call.method, call.path, content=call.content(),
                                       timeout=self.timeout + call.waits_s)
        except httpx.HTTPError as exc:
            raise unreachable(self.base_url, exc) from exc
        self._sent.note(answer.headers.get(calls.SENT_HEADER))
        return call.result(answer.status_code, answer.content)

    @property
    def role(self) -> Role:
        """The role of this client's token (agent or admin)."""
        if self._role is None:
            self._role = Role(self._run(calls.whoami()))
        return self._role

    # -- turns -------------------------------------------------------------------------------

    def append(self, session_id: str, role: str, content: str, *,
               importance: float | None = None, tool_call_id: str | None = None,
               tool_name: str | None = None, tool_calls: list[Any] | None = None,
               created_at: datetime | str | None = None, user_id: str | None = None,
               agent_id: str | None = None) -> str:
        result: str = self._run(calls.append(
            session_id=session_id, role=role, content=content, importance=importance,
            tool_call_id=tool_call_id, tool_name=tool_name, tool_calls=tool_calls,
            created_at=created_at, user_id=user_id, agent_id=agent_id))
        return result

    def append_many(self, turns: Sequence[Mapping[str, Any]]) -> list[str]:
        result: list[str] = self._run(calls.append_many(turns))
        return result

    @contextmanager
    def batched(self) -> Iterator[RemoteMemoryClient]:
        """Accepted for the local client's sake; each call is still its own request (use
        :meth:`append_many` to send many turns in one)."""
        yield self

    def flush(self, timeout: float = 10.0) -> None:
        self._run(calls.flush(timeout, self._sent))

    def get_context(self, session_id: str, query: str | None = None,
                    scope: str = "session") -> list[ContextItem]:
        result: list[ContextItem] = self._run(calls.get_context(session_id, query, scope))
        return result

    def history(self, session_id: str, limit: int = 50, *, before: str | None = None,
                after: str | None = None, summaries: bool = True) -> list[Message]:
        result: list[Message] = self._run(
            calls.history(session_id, limit, before, after, summaries))
        return result

    def sessions(self, user_id: str | None = None, agent_id: str | None = None, *,
                 limit: int = 50, before: datetime | str | None = None) -> list[SessionInfo]:
        result: list[SessionInfo] = self._run(calls.sessions(user_id, agent_id, limit, before))
        return result

    def forget_session(self, session_id: str) -> str:
        result: str = self._run(calls.forget_session(session_id))
        return result

    def forget_message(self, session_id: str, message_id: str) -> str:
        result: str = self._run(calls.forget_message(session_id, message_id))
        return result

    def forget_user(self, user_id: str) -> str:
        result: str = self._run(calls.forget_user(user_id))
        return result

    def wait_forgotten(self, event_id: str, timeout: float = 30.0) -> dict[str, Any]:
        result: dict[str, Any] = self._run(calls.wait_forgotten(event_id, timeout, self._sent))
        return result

    # -- facts -------------------------------------------------------------------------------

    def set_fact(self, category: str, key: str, value: str, source: str = "agent", *,
                 force: bool = False, user_id: str | None = None) -> str:
        result: str = self._run(calls.set_fact(category, key, value, source, force, user_id))
        return result

    def delete_fact(self, category: str, key: str, source: str = "agent", *,
                    force: bool = False, user_id: str | None = None) -> str:
        result: str = self._run(calls.delete_fact(category, key, source, force, user_id))
        return result

    def facts(self, category: str | None = None, *, user_id: str | None = None) -> list[Fact]:
        result: list[Fact] = self._run(calls.facts(category, user_id))
        return result

    def fact_history(self, category: str, key: str, *,
                     user_id: str | None = None) -> list[FactChange]:
        result: list[FactChange] = self._run(calls.fact_history(category, key, user_id))
        return result

    # -- documents ---------------------------------------------------------------------------

    def put_document(self, namespace: tuple[str, ...] | list[str], key: str,
                     value: dict[str, Any], *, text: str | None = None,
                     ttl_minutes: float | None = None, user_id: str | None = None) -> str:
        result: str = self._run(calls.put_document(namespace, key, value, text, ttl_minutes,
                                                      user_id))
        return result

    def delete_document(self, namespace: tuple[str, ...] | list[str], key: str, *,
                        user_id: str | None = None) -> str:
        result: str = self._run(calls.change_document("delete", namespace, key, user_id))
        return result

    def touch_document(self, namespace: tuple[str, ...] | list[str], key: str, *,
                       user_id: str | None = None) -> str:
        result: str = self._run(calls.change_document("touch", namespace, key, user_id))
        return result

    def document(self, namespace: tuple[str, ...] | list[str], key: str, *,
                 user_id: str | None = None) -> Document | None:
        result: Document | None = self._run(calls.document(namespace, key, user_id))
        return result

    def search_documents(
        self, prefix: tuple[str, ...] | list[str] = (), *, query: str | None = None,
        filter: dict[str, Any] | None = None, limit: int = 10, offset: int = 0,
        user_id: str | None = None,
    ) -> list[FoundDocument]:
        result: list[FoundDocument] = self._run(calls.search_documents(
            prefix, query, filter, limit, offset, user_id))
        return result

    def document_namespaces(self, *, user_id: str | None = None) -> list[tuple[str, ...]]:
        result: list[tuple[str, ...]] = self._run(calls.document_namespaces(user_id))
        return result

    # -- tasks -------------------------------------------------------------------------------

    def schedule_task(self, name: str, schedule: str, prompt: str, *, oneshot: bool = False,
                      trusted: bool = False, tz: str | None = None) -> str:
        result: str = self._run(calls.schedule_task(name, schedule, prompt, oneshot, trusted,
                                                    tz))
        return result

    def pause_task(self, task_id: str) -> None:
        self._run(calls.change_task(task_id, "pause"))

    def resume_task(self, task_id: str) -> None:
        self._run(calls.change_task(task_id, "resume"))

    def delete_task(self, task_id: str) -> None:
        self._run(calls.change_task(task_id, "delete"))

    def task(self, task_id: str) -> Task:
        result: Task = self._run(calls.task(task_id))
        return result

    def tasks(self) -> list[Task]:
        result: list[Task] = self._run(calls.tasks())
        return result

    # -- terminal approvals and tool macros --------------------------------------------------

    def allow_prefix(self, command: str) -> str:
        result: str = self._run(calls.allow_prefix(command))
        return result

    def revoke_prefix(self, prefix: str) -> str:
        result: str = self._run(calls.revoke_prefix(prefix))
        return result

    def allowed_prefixes(self) -> list[AllowedPrefix]:
        result: list[AllowedPrefix] = self._run(calls.allowed_prefixes())
        return result

    def is_command_allowed(self, command: str, *, trusted: bool = False) -> bool:
        result: bool = self._run(calls.is_command_allowed(command, trusted))
        return result

    def record_tool_call(self, session_id: str, tool: str,
                         args: Mapping[str, Any] | None = None) -> str:
        result: str = self._run(calls.record_tool_call(session_id, tool, args))
        return result

    def suggest_next_tools(self, tool: str,
                           args: Mapping[str, Any] | None = None) -> list[MacroSuggestion]:
        result: list[MacroSuggestion] = self._run(calls.suggest_next_tools(tool, args))
        return result

    def use_macro(self, macro_id: int) -> str:
        result: str = self._run(calls.use_macro(macro_id))
        return result
