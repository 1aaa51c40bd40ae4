"""The table of memq's operations: every method a client offers, once.

Each row says how the operation travels over HTTP (method, path, the key of its answer),
what kind of call it is for a server (a read, a write the writer will apply, a wait for
the writer) and the right a caller needs. Everything else is derived from it and from the
method's signature in :mod:`memq.producers.surface`:

- the four clients (sync and async, local and remote) share one surface; a local client
  runs the method's operation (``_<name>_op``), a remote one sends the row's request;
- ``memq serve`` makes one route per row (``server/routes.py``), its body from the
  signature (``server/bodies.py``), and so the OpenAPI schema.

Adding a method: its row here, its signature in ``surface.py`` (then
``python -m memq.producers.unasync`` for the async twin) and its ``_<name>_op``.
"""

from __future__ import annotations

import enum
from collections.abc import Mapping
from dataclasses import dataclass, field
from types import MappingProxyType


class Right(enum.StrEnum):
    """What a caller must be allowed to do to call an operation."""

    READ = "read"
    WRITE = "write"
    FORGET = "forget"
    ADMIN = "admin"
    """The person's alone (admin credentials): never a key's."""


class Kind(enum.StrEnum):
    """What a server does around the call."""

    READ = "read"
    """Answered from the database at once."""
    WRITE = "write"
    """Sends events and answers at once, with the caller's inbox position."""
    WAIT = "wait"
    """Waits for the writer up to the call's ``timeout``, after the caller's position."""


@dataclass(frozen=True)
class Operation:
    name: str
    method: str
    path: str
    """Under ``/v1``; ``{name}`` marks an argument carried in the path."""
    answer: str | None
    """The key of the JSON answer that holds the result (None: no content)."""
    kind: Kind
    right: Right
    status: int = 200
    query_path: str | None = None
    """A ``GET`` form of a ``POST`` read, with the arguments as query parameters."""
    private: tuple[str, ...] = ()
    """Arguments a server never takes from its caller (whether a task is trusted is the
    runner's to know): a remote client keeps them to itself."""
    renamed: Mapping[str, str] = field(default_factory=lambda: MappingProxyType({}))
    """Argument -> its name in the JSON body, where the API named it first."""
    done: str | None = None
    """For a method that returns nothing: the key its answer sets to true."""

    @property
    def path_args(self) -> tuple[str, ...]:
        return tuple(part[1:-1] for part in self.path.split("/")
                     if part.startswith("{") and part.endswith("}"))


R, W, F, A = Right.READ, Right.WRITE, Right.FORGET, Right.ADMIN


def _read(name: str, method: str, path: str, answer: str, *, right: Right = R,
          query_path: str | None = None, private: tuple[str, ...] = ()) -> Operation:
    return Operation(name, method, path, answer, Kind.READ, right, query_path=query_path,
                     private=private)


def _write(name: str, method: str, path: str, answer: str | None, *, right: Right = W,
           status: int = 200, renamed: Mapping[str, str] | None = None) -> Operation:
    return Operation(name, method, path, answer, Kind.WRITE, right,
                     status=status if answer is not None else 204,
                     renamed=MappingProxyType(dict(renamed or {})))


def _wait(name: str, path: str, answer: str, *, right: Right, done: bool = False
          ) -> Operation:
    return Operation(name, "POST", path, answer, Kind.WAIT, right,
                     done=answer if done else None)


_ROWS = [
    # turns and context
    _write("append", "POST", "/messages", "id", status=201),
    _write("append_many", "POST", "/messages/batch", "ids", status=201,
           renamed={"turns": "messages"}),
    _wait("flush", "/flush", "flushed", right=W, done=True),
    _read("get_context", "POST", "/context", "items"),
    _read("history", "POST", "/history", "messages", query_path="/history"),
    # sessions and forgetting
    _read("sessions", "POST", "/sessions", "sessions", query_path="/sessions"),
    _write("forget_session", "POST", "/forget/session", "event_id", right=F),
    _write("forget_message", "POST", "/forget/message", "event_id", right=F),
    _write("forget_user", "POST", "/forget/user", "event_id", right=F),
    _wait("wait_forgotten", "/forget/wait", "erased", right=F),
    # facts
    _write("set_fact", "POST", "/facts", "event_id"),
    _write("delete_fact", "POST", "/facts/delete", "event_id"),
    _read("facts", "POST", "/facts/query", "facts", query_path="/facts"),
    _read("fact_history", "POST", "/facts/history", "changes", query_path="/facts/history"),
    # documents (the key-value store of agent frameworks)
    _write("put_document", "POST", "/documents", "event_id"),
    _write("delete_document", "POST", "/documents/delete", "event_id"),
    _write("touch_document", "POST", "/documents/touch", "event_id"),
    _read("document", "POST", "/documents/get", "document"),
    _read("search_documents", "POST", "/documents/search", "documents"),
    _read("document_namespaces", "POST", "/documents/namespaces", "namespaces"),
    # scheduled tasks
    _write("schedule_task", "POST", "/tasks", "id", status=201),
    _write("pause_task", "POST", "/tasks/{task_id}/pause", None),
    _write("resume_task", "POST", "/tasks/{task_id}/resume", None),
    _write("delete_task", "DELETE", "/tasks/{task_id}", None),
    _read("task", "GET", "/tasks/{task_id}", "task"),
    _read("tasks", "GET", "/tasks", "tasks"),
    # terminal approvals
    _write("allow_prefix", "POST", "/prefixes", "prefix"),
    _write("revoke_prefix", "POST", "/prefixes/revoke", "prefix"),
    _read("allowed_prefixes", "GET", "/prefixes", "prefixes"),
    _read("is_command_allowed", "POST", "/commands/check", "allowed", private=("trusted",)),
    # tool macros
    _write("record_tool_call", "POST", "/tool-calls", "event_id"),
    _read("suggest_next_tools", "POST", "/tool-calls/suggest", "suggestions"),
    _write("use_macro", "POST", "/macros/{macro_id}/use", "event_id"),
    # the change feed (and memq serve's own GET /v1/changes, as server-sent events)
    _read("changes_page", "POST", "/changes/page", "page"),
    # API keys
    _write("create_key", "POST", "/keys", "key", right=A, status=201),
    _read("api_keys", "GET", "/keys", "keys", right=A),
    _write("revoke_key", "POST", "/keys/{key_id}/revoke", "key_id", right=A),
    # webhooks (the person's)
    _write("add_webhook", "POST", "/webhooks", "webhook", right=A, status=201),
    _read("webhooks", "GET", "/webhooks", "webhooks", right=A),
    _write("remove_webhook", "POST", "/webhooks/{webhook_id}/remove", "webhook_id", right=A),
    # what the writer set aside (the person's)
    _write("drop_rejected", "POST", "/rejected/drop", "event_id", right=A),
]

OPERATIONS: Mapping[str, Operation] = MappingProxyType({op.name: op for op in _ROWS})

BUILT_ON: Mapping[str, str] = MappingProxyType({"changes": "changes_page"})
"""Client methods written on top of an operation of the table (not operations of their
own: no route, no transport), by the operation each calls."""

__all__ = ["BUILT_ON", "OPERATIONS", "Kind", "Operation", "Right"]
