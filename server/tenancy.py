"""A key's calls in its tenant's names: what the caller names is mapped into the tenant
before the client runs the call, and what the client answers is mapped back.

A key's caller writes ids as it knows them (``alice``, ``s1``); below this module they are
stored ids (:mod:`memq.tenants`): the same name in two tenants is two different ids, so a
key cannot name, list or search another tenant's data, whatever it sends. Three rules:

- An id a caller sends must not hold the tenant separator (no key may write a stored id,
  the default tenant's keys included).
- A fact or document of no user is, in a tenant, the tenant's pseudo-user's
  (:func:`memq.tenants.everyone`): a tenant's "global" data is its own.
- A task's name and a tool's name are the tenant's own, as ids are: a task and a learned
  macro belong to the tenant of their stored name. Task and macro ids are memq's, unique
  across tenants: a call naming one of another tenant's gets ``NotFound``, as for one that
  does not exist. Command approvals are each tenant's own: a key checks commands against
  its tenant's.

The grant (:mod:`memq.server.grants`) is judged in the caller's names, before mapping:
a key's users and agents are names inside its tenant.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from typing import Any

from memq import tenants
from memq.errors import NotFound, ValidationError
from memq.events import check_characters
from memq.printable import shown
from memq.producers.changes import ChangesPage
from memq.producers.client import MemoryClient
from memq.producers.macros import MAX_ID, MacroSuggestion
from memq.producers.operations import Operation
from memq.producers.tasks import no_task
from memq.store.read.changes import in_tenant
from memq.store.read.macros import trigger_tool
from memq.store.read.scope import Owner
from memq.store.read.tasks import Task

MAPPED = ("session_id", "user_id", "agent_id")
"""Arguments (and answer fields) that are ids inside a tenant."""
UNMAPPED_IDS = ("task_id", "message_id", "event_id", "key_id", "before", "after")
"""Ids that are unique across tenants (made by memq) but must not smuggle a stored id."""
ALL_USERS = frozenset({"set_fact", "delete_fact", "facts", "fact_history", "put_document",
                       "delete_document", "touch_document", "document", "search_documents",
                       "document_namespaces"})
"""Calls where no ``user_id`` means the global data, which in a tenant is its own."""
OWN_NAMES = {"schedule_task": "name", "record_tool_call": "tool", "suggest_next_tools": "tool"}
"""Per call, the argument that is a name inside the tenant: a task's, a tool's."""
ANSWER_NAMES: Mapping[type, str] = {Task: "name", MacroSuggestion: "tool"}
"""Per kind of answer, its field that is a name inside the tenant."""
TASK_TARGETS = frozenset({"task", "pause_task", "resume_task", "delete_task"})
OWN_TENANT = frozenset({"sessions", "allowed_prefixes", "is_command_allowed"})
"""Calls that take a ``tenant``: a key's is always its own (another's does not exist)."""


def refuse_stored_ids(op: Operation, given: Mapping[str, Any]) -> None:
    """ValidationError if an id or name the caller sends holds a control character (the
    tenant separator among them) or a lone surrogate, which the grant's lookup of the
    session's owner could not send to SQLite; or one mapped into the tenant is blank
    (inside a tenant, the empty name is its pseudo-user's, :func:`memq.tenants.everyone`)
    or not a string at all (it is compared with the key's grant before the call's own
    checks read it)."""
    own = OWN_NAMES.get(op.name)
    for call in _calls(op, given):
        for name in (*MAPPED, *UNMAPPED_IDS, *((own,) if own else ())):
            value = call.get(name)
            if name in MAPPED and value is not None and not isinstance(value, str):
                raise ValidationError(f"{name} must be a string, got {type(value).__name__}")
            if isinstance(value, str):  # the separator too: a control character
                check_characters(name, value)
            if isinstance(value, str) and not value.strip() and name not in UNMAPPED_IDS:
                raise ValidationError(f"{name} must not be empty")


def refuse_other_tenants(tenant: str, op: Operation, given: Mapping[str, Any],
                         client: MemoryClient) -> None:
    """NotFound for a call on another tenant's task or macro: their ids are memq's, the
    same in every tenant's names, so only the task's or macro's own name tells whose it
    is. The task is read as the caller's client reads it (its own pending writes too)."""
    if op.name in TASK_TARGETS and isinstance(given.get("task_id"), str):
        task = client.task(given["task_id"])
        if tenants.tenant_of(task.name) != tenant:
            raise NotFound(no_task(given['task_id']))
    macro_id = given.get("macro_id")
    if op.name == "use_macro" and type(macro_id) is int and 1 <= macro_id <= MAX_ID:
        with client.readers.connection() as conn:
            tool = trigger_tool(conn, macro_id)
        if tool is not None and tenants.tenant_of(tool) != tenant:
            raise NotFound(f"no macro {macro_id}")


def into(tenant: str, op: Operation, given: Mapping[str, Any]) -> dict[str, Any]:
    """The call's arguments as stored ids of ``tenant`` (a new dict: ``given`` is kept)."""
    mapped = dict(given)
    if op.name == "append_many" and isinstance(given.get("turns"), list):
        mapped["turns"] = [_ids_into(tenant, t) if isinstance(t, Mapping) else t
                           for t in given["turns"]]
    mapped = _ids_into(tenant, mapped)
    own = OWN_NAMES.get(op.name)
    if own is not None and isinstance(mapped.get(own), str):
        mapped[own] = tenants.inside(tenant, mapped[own])
    if op.name in ALL_USERS and mapped.get("user_id") is None:
        mapped["user_id"] = tenants.everyone(tenant)
    if op.name in OWN_TENANT:
        if given.get("tenant") not in (None, tenant):
            raise NotFound(f"no tenant {shown(given['tenant']):.60}")
        mapped["tenant"] = tenant
    return mapped


def _ids_into(tenant: str, call: Mapping[str, Any]) -> dict[str, Any]:
    return {k: tenants.inside(tenant, v) if k in MAPPED and isinstance(v, str) else v
            for k, v in call.items()}


def out_of(tenant: str, op: Operation, answer: Any) -> Any:
    """``answer`` in ``tenant``'s names: lists keep only the tenant's items."""
    if isinstance(answer, ChangesPage):
        shown = (in_tenant(tenant, c) for c in answer.changes)
        return dataclasses.replace(answer, changes=[c for c in shown if c is not None])
    if isinstance(answer, list):
        return [_strip(tenant, item) for item in answer if _belongs(tenant, item)]
    return _strip(tenant, answer)


def owner_in(tenant: str, owner: Owner | None) -> Owner | None:
    """A session's stored owner in ``tenant``'s names; None if another tenant's."""
    if owner is None:
        return None
    user, agent = (None if v is None else tenants.name_in(tenant, v) for v in owner)
    if (owner.user_id is not None and user is None) or (owner.agent_id is not None
                                                        and agent is None):
        return None
    return Owner(None if user == "" else user, agent)


def _belongs(tenant: str, item: Any) -> bool:
    if not dataclasses.is_dataclass(item):
        return True
    for name in _names_of(item):
        value = getattr(item, name, None)
        if isinstance(value, str) and tenants.tenant_of(value) != tenant:
            return False
    inner = getattr(item, "document", None)
    return inner is None or _belongs(tenant, inner)


def _strip(tenant: str, item: Any) -> Any:
    if isinstance(item, list):
        return [_strip(tenant, v) for v in item]
    if not dataclasses.is_dataclass(item) or isinstance(item, type):
        return item
    changes: dict[str, Any] = {}
    names = _names_of(item)
    for field in dataclasses.fields(item):
        value = getattr(item, field.name)
        if field.name in names and isinstance(value, str):
            name = _outside(tenant, value, field.name)
            if name != value:
                changes[field.name] = name
        elif dataclasses.is_dataclass(value) and (inner := _strip(tenant, value)) is not value:
            changes[field.name] = inner
    # In the default tenant the stored names are the names: nothing is copied.
    return dataclasses.replace(item, **changes) if changes else item


def _names_of(item: Any) -> tuple[str, ...]:
    """The fields of an answer that are names inside a tenant."""
    own = ANSWER_NAMES.get(type(item))
    return MAPPED if own is None else (*MAPPED, own)


def _outside(tenant: str, stored: str, what: str) -> str | None:
    name = tenants.name_in(tenant, stored)
    if name is None:  # a list was cut to the tenant first: this is a bug, not an answer
        raise NotFound(f"no {what.removesuffix('_id')} {shown(stored):.60}")
    return None if name == "" and what == "user_id" else name


def _calls(op: Operation, given: Mapping[str, Any]) -> list[Mapping[str, Any]]:
    turns = given.get("turns")
    if op.name == "append_many" and isinstance(turns, list):
        return [given, *(t for t in turns if isinstance(t, Mapping))]
    return [given]
