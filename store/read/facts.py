"""Reading facts: the current values (projection) and their history (the event log).

The history replays the same guard as the writer (:func:`store.projections.facts.may_change`)
over the key's events, so each entry says whether it changed the value.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any

import apsw
import orjson

from memq import tenants
from memq.events import EventType
from memq.store.projections.facts import may_change as may_change  # the guard, for readers


@dataclass(frozen=True)
class Fact:
    id: int
    category: str
    key: str
    value: str
    source: str
    created_at: str
    updated_at: str
    user_id: str | None = None
    """The user the fact belongs to; None for a global fact."""
    valid_from: str | None = None
    """When the value became true in the world (the setter's word, or when it was set)."""
    valid_to: str | None = None
    """When it stopped being true: None while it still is."""


@dataclass(frozen=True)
class FactChange:
    """One ``fact.set``, ``fact.deleted`` or ``fact.imported`` event for a key, oldest
    first in a history."""

    seq: int
    event_id: str
    action: str  # "set", "deleted" or "imported" (the value a legacy upgrade found)
    value: str | None
    source: str | None
    force: bool
    created_at: str
    applied: bool  # False: a user's value was protected from this agent change
    valid_from: str | None = None
    """A value's: when it became true in the world (None for a deletion)."""
    valid_to: str | None = None
    """When the value stopped being true: the next applied change's time in the world, or
    a deletion's own; None while it is the current value (or was never applied)."""


FACT_COLUMNS = "id, category, key, value, source, created_at, updated_at, user_id"

VISIBLE_TO = "ifnull(user_id, '') IN (:everyone, ifnull(:user, ''))"
"""SQL condition on ``facts``: a global fact of the user's tenant (``:everyone``), or one of
the user ``:user`` (NULL: none). Its parameters are :func:`visible_to`'s.

Word for word the start of the unique index facts_by_key (migration 0014), so it seeks."""


def visible_to(user_id: str | None) -> dict[str, str | None]:
    """The parameters of :data:`VISIBLE_TO`: the default tenant's global facts are stored
    with no user, another tenant's with its pseudo-user (:func:`memq.tenants.everyone`)."""
    return {"user": user_id, "everyone": tenants.everyone_beside(user_id) or ""}


_SINCE = """(SELECT v.valid_from FROM fact_versions AS v
    WHERE ifnull(v.user_id, '') = ifnull(facts.user_id, '') AND v.category = facts.category
      AND v.key = facts.key AND v.valid_to IS NULL)"""
_AS_OF = f"""SELECT seq, category, key, value, source, recorded_at, recorded_at, user_id,
        valid_from, valid_to FROM (
    SELECT *, row_number() OVER (PARTITION BY ifnull(user_id, ''), category, key
                                 ORDER BY seq DESC) AS latest
    FROM fact_versions WHERE {VISIBLE_TO} AND valid_from <= :as_of
      AND (valid_to IS NULL OR valid_to > :as_of) AND (:category IS NULL OR category = :category))
    WHERE latest = 1 ORDER BY category, key, user_id"""
"""The values true at ``:as_of``: of values a backdated change made overlap, the last set."""


def list_facts(
    conn: apsw.Connection, category: str | None = None, user_id: str | None = None,
    as_of: str | None = None,
) -> list[Fact]:
    """The global facts and ``user_id``'s (none of any other user's), ordered by category,
    key, then global before the user's; only ``category``'s when it is given. With
    ``as_of`` (RFC 3339, UTC), the values that were true then in the world."""
    params = {**visible_to(user_id), "category": category, "as_of": as_of}
    if as_of is not None:
        return [Fact(*row) for row in conn.execute(_AS_OF, params)]
    where = VISIBLE_TO + ("" if category is None else " AND category = :category")
    rows = conn.execute(
        f"SELECT {FACT_COLUMNS}, {_SINCE} FROM facts WHERE {where} "
        "ORDER BY category, key, user_id", params)
    return [Fact(*row) for row in rows]


HISTORY = """
    SELECT seq, event_id, type, created_at, payload FROM events
    WHERE type IN ('fact.set', 'fact.deleted')
      AND json_extract(payload, '$.user_id') IS ?1
      AND json_extract(payload, '$.category') = ?2 AND json_extract(payload, '$.key') = ?3
    UNION ALL
    SELECT seq, event_id, type, created_at, payload FROM events
    WHERE type = 'fact.imported' AND ?1 IS NULL
      AND json_extract(payload, '$.category') = ?2 AND json_extract(payload, '$.key') = ?3
    ORDER BY seq"""
"""One fact's change events. The first half repeats word for word the terms of the index
events_fact_history (migration 0014), which it seeks; the second finds the value a legacy
upgrade brought in (always a global fact), among the few fact.imported events (index
events_by_type)."""


def fact_history(
    conn: apsw.Connection, category: str, key: str, user_id: str | None = None
) -> list[FactChange]:
    """Every change event of one fact (global, or ``user_id``'s), oldest first, each
    marked applied or not."""
    rows = conn.execute(HISTORY, (user_id, category, key)).fetchall()
    changes: list[FactChange] = []
    current, open_at = None, None  # the current value's source, its place in `changes`
    for row in rows:
        change = _change(row, current)
        if change.applied:
            if open_at is not None:  # the value before ends where this change begins
                before = changes[open_at]
                ends = max(before.valid_from or "", change.valid_from or change.valid_to or "")
                changes[open_at] = replace(before, valid_to=ends)
            current = None if change.action == "deleted" else change.source
            open_at = None if change.action == "deleted" else len(changes)
        changes.append(change)
    return changes


_ACTIONS = {EventType.FACT_SET: "set", EventType.FACT_DELETED: "deleted",
            EventType.FACT_IMPORTED: "imported"}


def _change(row: tuple[Any, ...], current: str | None) -> FactChange:
    seq, event_id, etype, created_at, raw = row
    payload = orjson.loads(raw)
    force = bool(payload.get("force"))
    source = payload.get("source")
    action = _ACTIONS[etype]
    return FactChange(
        seq=seq,
        event_id=event_id,
        action=action,
        value=payload.get("value"),
        source=source,
        force=force,
        created_at=created_at,
        applied=may_change(current, source, force),
        valid_from=None if action == "deleted" else (
            payload.get("valid_from") or payload.get("updated_at") or created_at),
        valid_to=payload.get("valid_to") or created_at if action == "deleted" else None,
    )
