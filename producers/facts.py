"""Facts: what an agent or its user knows, one value per (user, category, key).

A fact set with ``user_id`` belongs to that user; without one it is global. Reading
with ``user_id`` gives the global facts and that user's, never another user's.
``set_fact`` and ``delete_fact`` send events and return at once (``flush`` waits for
them). ``facts`` shows what is committed with this client's own uncommitted changes laid
over it (read-your-writes, ``producers/pending.py``; a fact set by this client and not yet
committed has id 0); ``fact_history`` is the committed record. A value set with
``source="user"`` is protected: an agent's (or consolidation's) change or deletion is
recorded in the log but does not touch it unless it is sent with ``force=True`` (the
person's right); a value set with ``force=True`` is the person's, stored with
``source="user"``, so it is protected in turn.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any

from memq import tenants
from memq.clock import normalize_rfc3339
from memq.errors import ValidationError
from memq.events import Event, EventType, check_identifier
from memq.producers.mixin import ClientBase, check_flag
from memq.producers.ops import Op, Read
from memq.store.read.facts import Fact, FactChange, fact_history, list_facts, may_change


class FactsOps(ClientBase):
    """The facts operations (``producers/ops.py``) both clients run."""

    def _set_fact_op(
        self, category: str, key: str, value: str, source: str = "agent", *,
        force: bool = False, user_id: str | None = None,
        valid_from: datetime | str | None = None,
    ) -> Op[str]:
        payload: dict[str, Any] = {
            "category": _name("category", category),
            "key": _name("key", key),
            "value": _value(value),
            # Only the person may force; a forced value is theirs, and stays protected.
            "source": "user" if force is True else source,
        }
        _when(payload, "valid_from", valid_from)
        return (yield from self._send_op(EventType.FACT_SET,
                                         _guarded(payload, force, user_id)))

    def _delete_fact_op(
        self, category: str, key: str, source: str = "agent", *, force: bool = False,
        user_id: str | None = None, valid_to: datetime | str | None = None,
    ) -> Op[str]:
        payload: dict[str, Any] = {
            "category": _name("category", category),
            "key": _name("key", key),
            "source": source,
        }
        _when(payload, "valid_to", valid_to)
        return (yield from self._send_op(EventType.FACT_DELETED,
                                         _guarded(payload, force, user_id)))

    def _facts_op(self, category: str | None, user_id: str | None,
                  as_of: datetime | str | None) -> Op[list[Fact]]:
        if category is not None:
            _name("category", category)
        if user_id is not None:
            _name("user_id", user_id)
        if as_of is not None:
            when = normalize_rfc3339(as_of, what="as_of")
            found: list[Fact] = yield Read(list_facts, (category, user_id, when))
            return found
        pending = yield from self._live_op(FACT_EVENTS)
        committed = yield Read(list_facts, (category, user_id))
        return with_pending_facts(committed, pending, category, user_id)

    def _fact_history_op(
        self, category: str, key: str, user_id: str | None
    ) -> Op[list[FactChange]]:
        category, key = _name("category", category), _name("key", key)
        if user_id is not None:
            _name("user_id", user_id)
        changes: list[FactChange] = yield Read(fact_history, (category, key, user_id))
        return changes


FACT_EVENTS = (EventType.FACT_SET, EventType.FACT_DELETED)


def with_pending_facts(
    committed: list[Fact], pending: list[Event], category: str | None = None,
    user_id: str | None = None,
) -> list[Fact]:
    """``committed`` with the uncommitted fact events applied in order, under the same
    guard as the writer's (a user's value stays unless the change is forced); only the
    global ones and ``user_id``'s, as :func:`store.read.facts.list_facts` reads them."""
    current = {(f.user_id, f.category, f.key): f for f in committed}
    everyone = tenants.everyone_beside(user_id)
    for event in pending:
        p = event.payload
        owner = p.get("user_id")
        if (category is not None and p["category"] != category) or owner not in (everyone,
                                                                                 user_id):
            continue
        key = (owner, p["category"], p["key"])
        old = current.get(key)
        if not may_change(None if old is None else old.source, p["source"],
                          bool(p.get("force"))):
            continue
        if event.type == EventType.FACT_DELETED:
            current.pop(key, None)
            continue
        current[key] = Fact(
            id=0 if old is None else old.id, category=p["category"], key=p["key"],
            value=p["value"], source=p["source"], updated_at=event.created_at,
            created_at=event.created_at if old is None else old.created_at, user_id=owner)
    return sorted(current.values(), key=lambda f: (f.category, f.key, f.user_id or ""))


def _when(payload: dict[str, Any], name: str, value: datetime | str | None) -> None:
    if value is not None:
        payload[name] = normalize_rfc3339(value, what=name)


def _guarded(payload: dict[str, Any], force: bool, user_id: str | None) -> dict[str, Any]:
    """``payload`` with the optional ``force`` and ``user_id`` fields, checked."""
    if check_flag("force", force):
        payload["force"] = True
    if user_id is not None:
        payload["user_id"] = _name("user_id", user_id)
    return payload


def _name(what: str, value: Any) -> str:
    return check_identifier(what, value)


def _value(value: Any) -> str:
    if not isinstance(value, str):
        raise ValidationError(f"value must be a string, got {type(value).__name__}")
    if not value.strip():
        raise ValidationError("value must not be empty (use delete_fact to remove a fact)")
    return value
