"""Who may say what: the authority table of memq's three roles.

memq has three principals, told apart by Redis itself (ACL users, see :mod:`memq.acl`),
never by anything a client claims:

======  ==========================================  =========================
role    who                                         writes to
======  ==========================================  =========================
agent   ``MemoryClient`` in agent processes         ``memq:inbox``
worker  RQ workers (embeddings, summaries, runs)    ``memq:inbox:worker``
admin   the person (CLI), the writer, the scheduler ``memq:inbox:admin``
======  ==========================================  =========================

Redis lets each role write only its own stream, so the stream an entry arrives on says who
sent it. The writer asks :func:`refusal` about every event: one outside its stream's
rights is rejected with the reason, like any bad event. Clients ask the same table before
sending, so an agent calling an admin operation gets :class:`PermissionDenied` at once.

The table (:data:`RIGHTS`) looks at the event alone: its type and a few payload fields
(who a fact is from, ``force``, ``trusted``, a task's ``source``). One rule needs the
committed state, and :func:`target_refusal` states it for whoever holds that state: a task
that is trusted or comes from the configuration file is changed or deleted by admin only.

Admin may send everything. An event type without a row is admin-only, so a new type is
closed until someone decides who may send it (a test checks every type has its rows).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from enum import StrEnum
from typing import Any

from memq import names
from memq.errors import PermissionDenied
from memq.events import Event, EventType


class Role(StrEnum):
    AGENT = "agent"
    WORKER = "worker"
    ADMIN = "admin"


STREAM_OF_ROLE: Mapping[Role, str] = {
    Role.AGENT: names.INBOX_STREAM,
    Role.WORKER: names.WORKER_INBOX_STREAM,
    Role.ADMIN: names.ADMIN_INBOX_STREAM,
}
"""The one inbox stream each role writes (its ACL user may XADD to no other)."""

ROLE_OF_STREAM: Mapping[str, Role] = {
    **{stream: role for role, stream in STREAM_OF_ROLE.items()},
    # API keys' events: an agent's rights, and the key's grant on top (store/write/
    # attribution.py); only memq serve, with the admin's credentials, may push them.
    names.KEYS_INBOX_STREAM: Role.AGENT,
}

AGENT, WORKER, ADMIN = Role.AGENT, Role.WORKER, Role.ADMIN
ADMIN_ONLY = frozenset({ADMIN})

Payload = Mapping[str, Any]


def _always(payload: Payload) -> bool:
    return True


@dataclass(frozen=True)
class Right:
    """One row: events of ``event_type`` matching ``applies`` may come from ``roles``."""

    event_type: str
    roles: frozenset[Role]
    variant: str = ""
    """How the row's events differ from the type's others, in the words of a refusal."""
    applies: Callable[[Payload], bool] = _always


def _row(etype: str, *roles: Role, variant: str = "",
         applies: Callable[[Payload], bool] = _always) -> Right:
    return Right(etype, frozenset((*roles, ADMIN)), variant, applies)


def _user_sourced(payload: Payload) -> bool:
    return payload.get("source") == "user"


def _forced(payload: Payload) -> bool:
    return payload.get("force") is True


def _no_source(payload: Payload) -> bool:
    return "source" not in payload


def _trusted(payload: Payload) -> bool:
    return payload.get("trusted") is True


def _from_config(payload: Payload) -> bool:
    return payload.get("source") == "config"


T = EventType
RIGHTS: tuple[Right, ...] = (
    # Conversation turns are the agents'; a legacy import is the operator's.
    _row(T.MESSAGE_APPENDED, AGENT),
    _row(T.MESSAGE_IMPORTED),
    _row(T.FACT_IMPORTED),
    _row(T.MACRO_IMPORTED),
    _row(T.TASK_IMPORTED),
    # An agent may forget a session (its own); forgetting a whole user is the operator's.
    _row(T.SESSION_FORGOTTEN, AGENT),
    # One turn of a session is the agent's to forget as the whole session is (the SDKs'
    # "pop the last item"); a worker only computes, it never erases.
    _row(T.MESSAGE_FORGOTTEN, AGENT),
    _row(T.USER_FORGOTTEN),
    _row(T.RETENTION_APPLIED),  # the writer's own pass; the operator's through admin
    # What workers compute; an agent must not forge a vector, a summary or a run.
    _row(T.MESSAGE_EMBEDDED, WORKER),
    _row(T.MESSAGE_EMBEDDING_FAILED, WORKER),
    _row(T.SESSION_CONSOLIDATED, WORKER),
    _row(T.CONSOLIDATION_REQUESTED, WORKER),
    _row(T.TASK_FIRED, WORKER),
    # Facts: the user's are the person's; agents (and summaries, via workers) add their own.
    _row(T.FACT_SET, variant="with source=user", applies=_user_sourced),
    _row(T.FACT_SET, variant="with force=true (over the user's value)", applies=_forced),
    _row(T.FACT_SET, AGENT, WORKER),
    _row(T.FACT_DELETED, variant="with source=user", applies=_user_sourced),
    _row(T.FACT_DELETED, variant="with force=true (of the user's value)", applies=_forced),
    _row(T.FACT_DELETED, variant="without a source (unconditional)", applies=_no_source),
    _row(T.FACT_DELETED, AGENT),
    _row(T.MACRO_OBSERVED, AGENT),
    _row(T.MACRO_USED, AGENT),
    # Tasks: agents schedule and manage untrusted ones; trusted and config ones are admin's.
    _row(T.TASK_SCHEDULED, variant="with trusted=true", applies=_trusted),
    _row(T.TASK_SCHEDULED, variant="with source=config", applies=_from_config),
    _row(T.TASK_SCHEDULED, AGENT),
    _row(T.TASK_CHANGED, variant="with trusted=true", applies=_trusted),
    _row(T.TASK_CHANGED, AGENT),
    _row(T.TASK_DELETED, AGENT),
    # Documents (the key-value store of agent frameworks) are the agents' own, as facts are.
    _row(T.DOCUMENT_PUT, AGENT),
    _row(T.DOCUMENT_DELETED, AGENT),
    _row(T.DOCUMENT_TOUCHED, AGENT),
    # "Always allow" approvals are the person's alone.
    _row(T.PREFIX_ALLOWED),
    _row(T.PREFIX_REVOKED),
    # API keys are minted and revoked by the person alone.
    _row(T.KEY_CREATED),
    _row(T.KEY_REVOKED),
    # Webhooks send changes out, signed with a secret: the person registers them alone.
    _row(T.WEBHOOK_ADDED),
    _row(T.WEBHOOK_REMOVED),
    # What the writer set aside is the person's to read, replay or drop.
    _row(T.REJECTED_DROPPED),
)
"""Per event type, its rows in order: the first row whose ``applies`` holds decides."""

TARGETS_A_TASK = frozenset({EventType.TASK_CHANGED, EventType.TASK_DELETED})
"""Types whose right also depends on the task they name (see :func:`target_refusal`)."""

_BY_TYPE: dict[str, tuple[Right, ...]] = {}
for _right in RIGHTS:
    _BY_TYPE[_right.event_type] = (*_BY_TYPE.get(_right.event_type, ()), _right)


def right_for(etype: str, payload: Payload) -> Right:
    """The row that decides who may send this event (admin-only for a type without rows)."""
    for right in _BY_TYPE.get(etype, ()):
        if right.applies(payload):
            return right
    return Right(etype, ADMIN_ONLY, "(a type no role but admin may send)")


def refusal(role: Role, event: Event) -> str | None:
    """Why ``role`` may not send ``event``, or None if it may."""
    right = right_for(event.type, event.payload)
    if role in right.roles:
        return None
    return _reason(role, event.type, right.variant, right.roles)


def type_refusal(role: Role, etype: object) -> str | None:
    """Why ``role`` may send no event of type ``etype`` whatever its payload, or None if
    some event of it may come from ``role`` (or ``etype`` is no known type).

    For an entry too malformed to decode: a role outside every row of its type is told
    so first, rather than what else is wrong with the entry.
    """
    if not isinstance(etype, str) or etype not in _BY_TYPE:
        return None
    allowed = frozenset().union(*(right.roles for right in _BY_TYPE[etype]))
    return None if role in allowed else _reason(role, etype, "", allowed)


def target_refusal(role: Role, etype: str, *, trusted: bool, source: str) -> str | None:
    """Why ``role`` may not send an ``etype`` event naming a task whose committed state is
    ``trusted`` and ``source``; None if it may (or the type names no task)."""
    if role is ADMIN or etype not in TARGETS_A_TASK:
        return None
    if trusted:
        return _reason(role, etype, "of a trusted task", ADMIN_ONLY)
    if source == "config":
        return _reason(role, etype, "of a task from the configuration", ADMIN_ONLY)
    return None


def check(role: Role, etype: str, payload: Payload) -> None:
    """Raise :class:`PermissionDenied` if ``role`` may not send this event."""
    right = right_for(etype, payload)
    if role not in right.roles:
        raise PermissionDenied(_reason(role, etype, right.variant, right.roles))


def _reason(role: Role, etype: str, variant: str, roles: frozenset[Role]) -> str:
    what = f"{etype} {variant}".strip()
    allowed = " or ".join(r.value for r in Role if r in roles)
    return (f"{what} may only come from {allowed}, not from {_article(role)} "
            f"({STREAM_OF_ROLE[role]})")


def _article(role: Role) -> str:
    return f"an {role.value}" if role is Role.AGENT or role is Role.ADMIN else f"a {role.value}"
