"""What :class:`~memq.producers.remote.RemoteMemoryClient` and its async twin send, and how
they read the answers: one function per client method, shared by both.

Each returns a :class:`Call` (method, path, JSON body or query, and how to turn the answer
into the local client's result types); the two clients differ only in how they send it.
Errors come back as problem details and are raised as the :mod:`memq.errors` class they
name (:func:`memq.problems.to_error`).
"""

from __future__ import annotations

import dataclasses
import re
import threading
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from types import MappingProxyType
from typing import Any, TypeVar
from urllib.parse import quote

import orjson

from memq.clock import normalize_rfc3339
from memq.errors import MemqError, ValidationError
from memq.printable import shown
from memq.problems import to_error
from memq.producers.context import ContextItem
from memq.producers.documents import FoundDocument
from memq.producers.macros import MAX_ID, MacroSuggestion
from memq.producers.mixin import check_flag
from memq.producers.prefixes import AllowedPrefix
from memq.store.read.documents import Document
from memq.store.read.facts import Fact, FactChange
from memq.store.read.messages import Message
from memq.store.read.sessions import SessionInfo
from memq.store.read.tasks import Task

T = TypeVar("T")
CLIENT_ID_HEADER = "Memq-Client-Id"
SENT_HEADER = "Memq-Sent"
POSITION = re.compile(r"[0-9]{1,20}-[0-9]{1,20}")
DEFAULT_TIMEOUT_S = 30.0
"""How long a call waits for the server, beyond what the call itself waits (flush)."""


def _nothing(body: Any) -> None:
    return None


@dataclass(frozen=True)
class Call:
    method: str
    path: str
    body: Any = None
    decode: Callable[[Any], Any] = _nothing
    waits_s: float = 0.0
    """How long the server may take on purpose (a flush's timeout)."""

    def content(self) -> bytes | None:
        if self.body is None:
            return None
        try:
            return orjson.dumps(self.body)
        except TypeError as exc:
            raise ValidationError(f"arguments must be JSON-serialisable: {exc}") from None

    def result(self, status: int, raw: bytes) -> Any:
        """The call's result from the answer, or the memq error it stands for."""
        try:
            body = orjson.loads(raw) if raw else None
        except orjson.JSONDecodeError:
            body = raw[:200].decode("utf-8", "replace")
        if status >= 400:
            raise to_error(status, body)
        try:
            return self.decode(body)
        except (KeyError, TypeError, ValueError) as exc:
            raise MemqError(f"{self.method} {self.path}: unexpected answer ({exc})") from None


def _when(value: datetime | str | None, what: str) -> str | None:
    return normalize_rfc3339(value, what=what) if isinstance(value, datetime) else value


def build(cls: type[T], data: Mapping[str, Any]) -> T:
    """A result dataclass from its JSON, ignoring fields a newer server may add."""
    names = {f.name for f in dataclasses.fields(cls)}  # type: ignore[arg-type]
    return cls(**{k: v for k, v in data.items() if k in names})


def context_item(data: Mapping[str, Any]) -> ContextItem:
    item = build(ContextItem, data)
    return dataclasses.replace(item, branches=tuple(item.branches),
                               scores=MappingProxyType(dict(item.scores)))


def _many(key: str, cls: type[T]) -> Callable[[Any], list[T]]:
    return lambda body: [build(cls, row) for row in body[key]]


def _field(key: str) -> Callable[[Any], Any]:
    return lambda body: body[key]


# -- turns -----------------------------------------------------------------------------------


def turn(session_id: str, role: str, content: str, *, importance: float | None = None,
         tool_call_id: str | None = None, tool_name: str | None = None,
         tool_calls: list[Any] | None = None, created_at: datetime | str | None = None,
         user_id: str | None = None, agent_id: str | None = None) -> dict[str, Any]:
    """The JSON of one turn: :meth:`MemoryClient.append`'s arguments."""
    given = {"session_id": session_id, "role": role, "content": content,
             "importance": importance, "tool_call_id": tool_call_id, "tool_name": tool_name,
             "tool_calls": tool_calls, "created_at": _when(created_at, "created_at"),
             "user_id": user_id, "agent_id": agent_id}
    return {k: v for k, v in given.items() if v is not None}


def append(**kwargs: Any) -> Call:
    return Call("POST", "/v1/messages", turn(**kwargs), decode=_field("id"))


def append_many(turns: Sequence[Mapping[str, Any]]) -> Call:
    if not isinstance(turns, Sequence) or isinstance(turns, (str, bytes)):
        raise ValidationError(f"turns must be a list, got {type(turns).__name__}")
    body = []
    for index, one in enumerate(turns):
        if not isinstance(one, Mapping):
            raise ValidationError(f"turns[{index}] must be a mapping of append's arguments")
        body.append({k: _when(v, k) if k == "created_at" else v for k, v in one.items()})
    return Call("POST", "/v1/messages/batch", {"messages": body}, decode=_field("ids"))


class Sent:
    """The highest inbox position this client's writes reached, as the server reports it
    (``Memq-Sent``): its flush asks for that much, so any server can answer it."""

    def __init__(self) -> None:
        self.position: tuple[int, int] | None = None
        self._lock = threading.Lock()

    def note(self, header: str | None) -> None:
        if header is None or not POSITION.fullmatch(header):
            return
        ms, _, seq = header.partition("-")
        position = (int(ms), int(seq))
        with self._lock:
            if self.position is None or position > self.position:
                self.position = position

    def text(self) -> str | None:
        position = self.position
        return None if position is None else f"{position[0]}-{position[1]}"


def flush(timeout: float, sent: Sent) -> Call:
    body = {"timeout": timeout, "sent": sent.text()}
    return Call("POST", "/v1/flush", body, waits_s=_seconds(timeout))


def _seconds(value: Any) -> float:
    return float(value) if isinstance(value, (int, float)) and not isinstance(value, bool) \
        else 0.0


def get_context(session_id: str, query: str | None, scope: str) -> Call:
    body = {"session_id": session_id, "query": query, "scope": scope}
    return Call("POST", "/v1/context", body,
                decode=lambda b: [context_item(row) for row in b["items"]])


def history(session_id: str, limit: int, before: str | None, after: str | None,
            summaries: bool) -> Call:
    body = {"session_id": session_id, "limit": limit, "before": before, "after": after,
            "summaries": summaries}
    return Call("POST", "/v1/history", body, decode=_many("messages", Message))


def sessions(user_id: str | None, agent_id: str | None, limit: int,
             before: datetime | str | None) -> Call:
    body = {"user_id": user_id, "agent_id": agent_id, "limit": limit,
            "before": _when(before, "before")}
    return Call("POST", "/v1/sessions", body, decode=_many("sessions", SessionInfo))


def forget_session(session_id: str) -> Call:
    return Call("POST", "/v1/forget/session", {"session_id": session_id},
                decode=_field("event_id"))


def forget_message(session_id: str, message_id: str) -> Call:
    return Call("POST", "/v1/forget/message", {"session_id": session_id,
                                               "message_id": message_id},
                decode=_field("event_id"))


def forget_user(user_id: str) -> Call:
    return Call("POST", "/v1/forget/user", {"user_id": user_id}, decode=_field("event_id"))


def wait_forgotten(event_id: str, timeout: float, sent: Sent) -> Call:
    body = {"event_id": event_id, "timeout": timeout, "sent": sent.text()}
    return Call("POST", "/v1/forget/wait", body, decode=_field("erased"),
                waits_s=2 * _seconds(timeout))


# -- facts -----------------------------------------------------------------------------------


def set_fact(category: str, key: str, value: str, source: str, force: bool,
             user_id: str | None) -> Call:
    body = {"category": category, "key": key, "value": value, "source": source,
            "force": force, "user_id": user_id}
    return Call("POST", "/v1/facts", body, decode=_field("event_id"))


def delete_fact(category: str, key: str, source: str, force: bool,
                user_id: str | None) -> Call:
    body = {"category": category, "key": key, "source": source, "force": force,
            "user_id": user_id}
    return Call("POST", "/v1/facts/delete", body, decode=_field("event_id"))


def facts(category: str | None, user_id: str | None) -> Call:
    return Call("POST", "/v1/facts/query", {"category": category, "user_id": user_id},
                decode=_many("facts", Fact))


def fact_history(category: str, key: str, user_id: str | None) -> Call:
    body = {"category": category, "key": key, "user_id": user_id}
    return Call("POST", "/v1/facts/history", body, decode=_many("changes", FactChange))


# -- documents -------------------------------------------------------------------------------


def put_document(namespace: Any, key: str, value: Any, text: str | None,
                 ttl_minutes: float | None, user_id: str | None) -> Call:
    body = {"namespace": _labels(namespace), "key": key, "value": value, "text": text,
            "ttl_minutes": ttl_minutes, "user_id": user_id}
    return Call("POST", "/v1/documents", body, decode=_field("event_id"))


def change_document(action: str, namespace: Any, key: str, user_id: str | None) -> Call:
    body = {"namespace": _labels(namespace), "key": key, "user_id": user_id}
    return Call("POST", f"/v1/documents/{action}", body, decode=_field("event_id"))


def document(namespace: Any, key: str, user_id: str | None) -> Call:
    body = {"namespace": _labels(namespace), "key": key, "user_id": user_id}
    return Call("POST", "/v1/documents/get", body,
                decode=lambda b: None if b["document"] is None else _document(b["document"]))


def search_documents(prefix: Any, query: str | None, filter: Any, limit: int, offset: int,
                     user_id: str | None) -> Call:
    body = {"prefix": _labels(prefix), "query": query, "filter": filter, "limit": limit,
            "offset": offset, "user_id": user_id}
    return Call("POST", "/v1/documents/search", body, decode=lambda b: [
        FoundDocument(_document(hit["document"]), hit["score"]) for hit in b["documents"]])


def document_namespaces(user_id: str | None) -> Call:
    return Call("POST", "/v1/documents/namespaces", {"user_id": user_id},
                decode=lambda b: [tuple(ns) for ns in b["namespaces"]])


def _labels(namespace: Any) -> Any:
    # A tuple travels as a JSON array; anything else goes as sent, for the server's check.
    return list(namespace) if isinstance(namespace, tuple) else namespace


def _document(data: Mapping[str, Any]) -> Document:
    return dataclasses.replace(build(Document, data), namespace=tuple(data["namespace"]))


# -- tasks -----------------------------------------------------------------------------------


def schedule_task(name: str, schedule: str, prompt: str, oneshot: bool, trusted: bool,
                  tz: str | None) -> Call:
    body = {"name": name, "schedule": schedule, "prompt": prompt, "oneshot": oneshot,
            "trusted": trusted, "tz": tz}
    return Call("POST", "/v1/tasks", body, decode=_field("id"))


def task_path(task_id: str, action: str = "") -> str:
    if not isinstance(task_id, str) or not task_id or "/" in task_id or task_id in (".", ".."):
        raise ValidationError(f"task_id must be a task's id, got {shown(task_id):.60}")
    return f"/v1/tasks/{quote(task_id, safe='')}{action}"


def change_task(task_id: str, action: str) -> Call:
    if action == "delete":
        return Call("DELETE", task_path(task_id))
    return Call("POST", task_path(task_id, f"/{action}"))


def tasks() -> Call:
    return Call("GET", "/v1/tasks", decode=_many("tasks", Task))


def task(task_id: str) -> Call:
    return Call("GET", task_path(task_id), decode=lambda b: build(Task, b["task"]))


# -- terminal approvals and tool macros ------------------------------------------------------


def allow_prefix(command: str) -> Call:
    return Call("POST", "/v1/prefixes", {"command": command}, decode=_field("prefix"))


def revoke_prefix(prefix: str) -> Call:
    return Call("POST", "/v1/prefixes/revoke", {"prefix": prefix}, decode=_field("prefix"))


def allowed_prefixes() -> Call:
    return Call("GET", "/v1/prefixes", decode=_many("prefixes", AllowedPrefix))


def is_command_allowed(command: str, trusted: bool) -> Call:
    """The server answers for the approvals alone: whether the task a command comes from
    is trusted is the runner's to know, never an argument the server takes."""
    check_flag("trusted", trusted)
    allowed = _field("allowed")
    return Call("POST", "/v1/commands/check", {"command": command},
                decode=lambda body: trusted or allowed(body))


def record_tool_call(session_id: str, tool: str, args: Mapping[str, Any] | None) -> Call:
    body = {"session_id": session_id, "tool": tool, "args": _mapping(args)}
    return Call("POST", "/v1/tool-calls", body, decode=_field("event_id"))


def suggest_next_tools(tool: str, args: Mapping[str, Any] | None) -> Call:
    return Call("POST", "/v1/tool-calls/suggest", {"tool": tool, "args": _mapping(args)},
                decode=_many("suggestions", MacroSuggestion))


def _mapping(args: Any) -> Any:
    return dict(args) if isinstance(args, Mapping) else args


def use_macro(macro_id: int) -> Call:
    if isinstance(macro_id, bool) or not isinstance(macro_id, int) or not (
            1 <= macro_id <= MAX_ID):
        raise ValidationError(f"macro_id must be a positive integer, got {shown(macro_id):.60}")
    return Call("POST", f"/v1/macros/{macro_id}/use", decode=_field("event_id"))


def whoami() -> Call:
    return Call("GET", "/v1/whoami", decode=_field("role"))


__all__ = ["CLIENT_ID_HEADER", "DEFAULT_TIMEOUT_S", "Call"]
