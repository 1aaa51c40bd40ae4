"""The endpoints: each one is a method of :class:`~memq.producers.client.MemoryClient`.

Writes return as soon as the event is in Redis, as the client's do; ``POST /v1/flush``
waits for what this caller sent. Reads run on the role's shared client (its read pool).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import orjson
from fastapi import APIRouter, Depends
from fastapi.responses import Response

from memq.producers.context import ContextItem
from memq.producers.macros import MacroSuggestion
from memq.producers.prefixes import AllowedPrefix
from memq.server import bodies as b
from memq.server.remotes import Remote, caller
from memq.store.read.documents import Document
from memq.store.read.facts import Fact, FactChange
from memq.store.read.messages import Message
from memq.store.read.sessions import SessionInfo
from memq.store.read.tasks import Task

router = APIRouter(prefix="/v1")
Caller = Depends(caller)
PROBLEMS: dict[int | str, dict[str, Any]] = {
    code: {"description": "problem details (RFC 9457), `title` names the memq error",
           "content": {"application/problem+json": {}}}
    for code in (401, 403, 404, 409, 413, 421, 422, 503, 504)
}


def answer(value: Any, status: int = 200) -> Response:
    return Response(orjson.dumps(value, default=_plain), status_code=status,
                    media_type="application/json")


SENT_HEADER = "Memq-Sent"
"""On every write's answer: the inbox position this caller's events reached (``ms-seq``);
a client sends the highest back with its flush (see ``remotes.py``)."""


def written(remote: Remote, value: Any, status: int = 200) -> Response:
    """The answer to a write, with the caller's inbox position."""
    position = remote.client.outbox.last_sent
    response = Response(status_code=status) if value is None else answer(value, status)
    if position is not None:
        response.headers[SENT_HEADER] = f"{position[0]}-{position[1]}"
    return response


def _plain(value: Any) -> Any:
    if hasattr(value, "keys"):  # the read-only mappings of ContextItem.scores
        return dict(value)
    raise TypeError(f"cannot encode {type(value).__name__}")


Endpoint = Callable[..., Response]


def _route(method: str, path: str, model: Any = None,
           status: int = 200) -> Callable[[Endpoint], Endpoint]:
    return router.api_route(path, methods=[method], response_model=model,
                            status_code=status, responses=PROBLEMS)


# -- who -------------------------------------------------------------------------------------


@_route("GET", "/whoami", b.Role)
def whoami(remote: Remote = Caller) -> Response:
    return answer({"role": remote.client.role.value})


# -- turns -----------------------------------------------------------------------------------


@_route("POST", "/messages", b.MessageId, 201)
def append(turn: b.Turn, remote: Remote = Caller) -> Response:
    with remote.lock:
        return written(remote, {"id": remote.client.append(**turn.model_dump())}, 201)


@_route("POST", "/messages/batch", b.MessageIds, 201)
def append_many(turns: b.Turns, remote: Remote = Caller) -> Response:
    given = [t.model_dump() for t in turns.messages]
    with remote.lock:
        return written(remote, {"ids": remote.client.append_many(given)}, 201)


@_route("POST", "/flush", b.Flushed)
def flush(wait: b.Wait | None = None, remote: Remote = Caller) -> Response:
    wait = wait or b.Wait()
    with remote.waiting(wait.timeout, wait.sent) as left:
        remote.waiter.flush(left)
    return answer({"flushed": True})


@_route("POST", "/context", dict[str, list[ContextItem]])
def get_context(asked: b.ContextQuery, remote: Remote = Caller) -> Response:
    items = remote.client.get_context(asked.session_id, asked.query, asked.scope)
    return answer({"items": items})


@_route("GET", "/history", dict[str, list[Message]])
def history(session_id: str, limit: int = 50, before: str | None = None,
            after: str | None = None, summaries: bool = True,
            remote: Remote = Caller) -> Response:
    rows = remote.client.history(session_id, limit, before=before, after=after,
                                 summaries=summaries)
    return answer({"messages": rows})


@_route("POST", "/history", dict[str, list[Message]])
def history_typed(asked: b.HistoryQuery, remote: Remote = Caller) -> Response:
    """``GET /v1/history`` with its arguments as JSON (RemoteMemoryClient's way)."""
    return history(asked.session_id, asked.limit, asked.before, asked.after,
                   asked.summaries, remote)


@_route("GET", "/sessions", dict[str, list[SessionInfo]])
def sessions(user_id: str | None = None, agent_id: str | None = None, limit: int = 50,
             before: str | None = None, remote: Remote = Caller) -> Response:
    found = remote.client.sessions(user_id, agent_id, limit=limit, before=before)
    return answer({"sessions": found})


@_route("POST", "/sessions", dict[str, list[SessionInfo]])
def sessions_typed(asked: b.SessionsQuery, remote: Remote = Caller) -> Response:
    """``GET /v1/sessions`` with its arguments as JSON."""
    return sessions(asked.user_id, asked.agent_id, asked.limit, asked.before, remote)


@_route("POST", "/forget/session", b.EventId)
def forget_session(asked: b.ForgetSession, remote: Remote = Caller) -> Response:
    with remote.lock:
        return written(remote, {"event_id": remote.client.forget_session(asked.session_id)})


@_route("POST", "/forget/message", b.EventId)
def forget_message(asked: b.ForgetMessage, remote: Remote = Caller) -> Response:
    with remote.lock:
        return written(remote, {"event_id": remote.client.forget_message(
            asked.session_id, asked.message_id)})


@_route("POST", "/forget/user", b.EventId)
def forget_user(asked: b.ForgetUser, remote: Remote = Caller) -> Response:
    with remote.lock:
        return written(remote, {"event_id": remote.client.forget_user(asked.user_id)})


@_route("POST", "/forget/wait", dict[str, Any])
def wait_forgotten(asked: b.WaitForgotten, remote: Remote = Caller) -> Response:
    with remote.waiting(asked.timeout, asked.sent) as left:
        return answer({"erased": remote.waiter.wait_forgotten(asked.event_id, left)})


# -- facts -----------------------------------------------------------------------------------


@_route("POST", "/facts", b.EventId)
def set_fact(fact: b.FactSet, remote: Remote = Caller) -> Response:
    with remote.lock:
        return written(remote, {"event_id": remote.client.set_fact(
            fact.category, fact.key, fact.value, fact.source, force=fact.force,
            user_id=fact.user_id)})


@_route("POST", "/facts/delete", b.EventId)
def delete_fact(fact: b.FactDelete, remote: Remote = Caller) -> Response:
    with remote.lock:
        return written(remote, {"event_id": remote.client.delete_fact(
            fact.category, fact.key, fact.source, force=fact.force, user_id=fact.user_id)})


@_route("GET", "/facts", dict[str, list[Fact]])
def facts(category: str | None = None, user_id: str | None = None,
          remote: Remote = Caller) -> Response:
    return answer({"facts": remote.client.facts(category, user_id=user_id)})


@_route("POST", "/facts/query", dict[str, list[Fact]])
def facts_typed(asked: b.FactsQuery, remote: Remote = Caller) -> Response:
    """``GET /v1/facts`` with its arguments as JSON."""
    return facts(asked.category, asked.user_id, remote)


@_route("GET", "/facts/history", dict[str, list[FactChange]])
def fact_history(category: str, key: str, user_id: str | None = None,
                 remote: Remote = Caller) -> Response:
    return answer({"changes": remote.client.fact_history(category, key, user_id=user_id)})


@_route("POST", "/facts/history", dict[str, list[FactChange]])
def fact_history_typed(asked: b.FactHistoryQuery, remote: Remote = Caller) -> Response:
    """``GET /v1/facts/history`` with its arguments as JSON."""
    return fact_history(asked.category, asked.key, asked.user_id, remote)


# -- documents (the key-value store of agent frameworks) ------------------------------------


@_route("POST", "/documents", b.EventId)
def put_document(asked: b.DocumentPut, remote: Remote = Caller) -> Response:
    """Embeds ``text`` here, with the server's model: the caller needs none."""
    with remote.lock:
        return written(remote, {"event_id": remote.client.put_document(
            asked.namespace, asked.key, asked.value, text=asked.text,
            ttl_minutes=asked.ttl_minutes, user_id=asked.user_id)})


@_route("POST", "/documents/delete", b.EventId)
def delete_document(asked: b.DocumentName, remote: Remote = Caller) -> Response:
    with remote.lock:
        return written(remote, {"event_id": remote.client.delete_document(
            asked.namespace, asked.key, user_id=asked.user_id)})


@_route("POST", "/documents/touch", b.EventId)
def touch_document(asked: b.DocumentName, remote: Remote = Caller) -> Response:
    with remote.lock:
        return written(remote, {"event_id": remote.client.touch_document(
            asked.namespace, asked.key, user_id=asked.user_id)})


@_route("POST", "/documents/get", dict[str, Any])
def document(asked: b.DocumentName, remote: Remote = Caller) -> Response:
    found = remote.client.document(asked.namespace, asked.key, user_id=asked.user_id)
    return answer({"document": None if found is None else document_json(found)})


@_route("POST", "/documents/search", dict[str, Any])
def search_documents(asked: b.DocumentSearch, remote: Remote = Caller) -> Response:
    hits = remote.client.search_documents(
        asked.prefix, query=asked.query, filter=asked.filter, limit=asked.limit,
        offset=asked.offset, user_id=asked.user_id)
    return answer({"documents": [{"document": document_json(h.document), "score": h.score}
                                 for h in hits]})


@_route("POST", "/documents/namespaces", dict[str, list[list[str]]])
def document_namespaces(asked: b.DocumentNamespaces, remote: Remote = Caller) -> Response:
    return answer({"namespaces": remote.client.document_namespaces(user_id=asked.user_id)})


def document_json(found: Document) -> dict[str, Any]:
    """A document on the wire: without its vector (bytes, and of no use to a caller)."""
    return {"namespace": list(found.namespace), "key": found.key, "value": found.value,
            "created_at": found.created_at, "updated_at": found.updated_at,
            "expires_at": found.expires_at, "user_id": found.user_id}


# -- tasks -----------------------------------------------------------------------------------


@_route("POST", "/tasks", b.MessageId, 201)
def schedule_task(task: b.TaskNew, remote: Remote = Caller) -> Response:
    with remote.lock:
        task_id = remote.client.schedule_task(task.name, task.schedule, task.prompt,
                                              oneshot=task.oneshot, trusted=task.trusted,
                                              tz=task.tz)
        return written(remote, {"id": task_id}, 201)


@_route("GET", "/tasks", dict[str, list[Task]])
def tasks(remote: Remote = Caller) -> Response:
    return answer({"tasks": remote.client.tasks()})


@_route("GET", "/tasks/{task_id}", dict[str, Task])
def task(task_id: str, remote: Remote = Caller) -> Response:
    return answer({"task": remote.client.task(task_id)})


@_route("POST", "/tasks/{task_id}/pause", None, 204)
def pause_task(task_id: str, remote: Remote = Caller) -> Response:
    with remote.lock:
        remote.client.pause_task(task_id)
        return written(remote, None, 204)


@_route("POST", "/tasks/{task_id}/resume", None, 204)
def resume_task(task_id: str, remote: Remote = Caller) -> Response:
    with remote.lock:
        remote.client.resume_task(task_id)
        return written(remote, None, 204)


@_route("DELETE", "/tasks/{task_id}", None, 204)
def delete_task(task_id: str, remote: Remote = Caller) -> Response:
    with remote.lock:
        remote.client.delete_task(task_id)
        return written(remote, None, 204)


# -- terminal approvals ----------------------------------------------------------------------


@_route("POST", "/prefixes", b.PrefixAnswer)
def allow_prefix(asked: b.Command, remote: Remote = Caller) -> Response:
    with remote.lock:
        return written(remote, {"prefix": remote.client.allow_prefix(asked.command)})


@_route("POST", "/prefixes/revoke", b.PrefixAnswer)
def revoke_prefix(asked: b.Prefix, remote: Remote = Caller) -> Response:
    with remote.lock:
        return written(remote, {"prefix": remote.client.revoke_prefix(asked.prefix)})


@_route("GET", "/prefixes", dict[str, list[AllowedPrefix]])
def allowed_prefixes(remote: Remote = Caller) -> Response:
    return answer({"prefixes": remote.client.allowed_prefixes()})


@_route("POST", "/commands/check", b.Allowed)
def is_command_allowed(asked: b.CommandCheck, remote: Remote = Caller) -> Response:
    allowed = remote.client.is_command_allowed(asked.command)  # never trusted= the caller's
    return answer({"allowed": allowed})


# -- tool macros -----------------------------------------------------------------------------


@_route("POST", "/tool-calls", b.EventId)
def record_tool_call(call: b.ToolCall, remote: Remote = Caller) -> Response:
    with remote.lock:
        return written(remote, {"event_id": remote.client.record_tool_call(
            call.session_id, call.tool, call.args)})


@_route("POST", "/tool-calls/suggest", dict[str, list[MacroSuggestion]])
def suggest_next_tools(asked: b.ToolSuggest, remote: Remote = Caller) -> Response:
    return answer({"suggestions": remote.client.suggest_next_tools(asked.tool, asked.args)})


@_route("POST", "/macros/{macro_id}/use", b.EventId)
def use_macro(macro_id: int, remote: Remote = Caller) -> Response:
    with remote.lock:
        return written(remote, {"event_id": remote.client.use_macro(macro_id)})


__all__ = ["router"]
