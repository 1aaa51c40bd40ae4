"""Reading facts: the current values (projection) and their history (the event log).

The history replays the same guard as the writer (:func:`store.projections.facts.may_change`)
over the key's events, so each entry says whether it changed the value.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import apsw
import orjson

from memq.events import EventType
from store.projections.facts import may_change


@dataclass(frozen=True)
class Fact:
    id: int
    category: str
    key: str
    value: str
    source: str
    created_at: str
    updated_at: str


@dataclass(frozen=True)
class FactChange:
    """One ``fact.set`` or ``fact.deleted`` event for a key, oldest first in a history."""

    seq: int
    event_id: str
    action: str  # "set" or "deleted"
    value: str | None
    source: str | None
    force: bool
    created_at: str
    applied: bool  # False: a user's value was protected from this agent change


FACT_COLUMNS = "id, category, key, value, source, created_at, updated_at"


def list_facts(conn: apsw.Connection, category: str | None = None) -> list[Fact]:
    """Current facts, ordered by category then key; all of them when ``category`` is None."""
    if category is None:
        rows = conn.execute(f"SELECT {FACT_COLUMNS} FROM facts ORDER BY category, key")
    else:
        rows = conn.execute(
            f"SELECT {FACT_COLUMNS} FROM facts WHERE category = ? ORDER BY key", (category,)
        )
    return [Fact(*row) for row in rows]


def fact_history(conn: apsw.Connection, category: str, key: str) -> list[FactChange]:
    """Every change event of one fact, oldest first, each marked applied or not."""
    rows = conn.execute(
        # Word for word the terms of the index events_fact_history (migration 0008).
        """SELECT seq, event_id, type, created_at, payload FROM events
           WHERE type IN ('fact.set', 'fact.deleted')
             AND json_extract(payload, '$.category') = ? AND json_extract(payload, '$.key') = ?
           ORDER BY seq""",
        (category, key),
    ).fetchall()
    changes, current = [], None
    for row in rows:
        change = _change(row, current)
        if change.applied:
            current = change.source if change.action == "set" else None
        changes.append(change)
    return changes


def _change(row: tuple[Any, ...], current: str | None) -> FactChange:
    seq, event_id, etype, created_at, raw = row
    payload = orjson.loads(raw)
    force = bool(payload.get("force"))
    source = payload.get("source")
    return FactChange(
        seq=seq,
        event_id=event_id,
        action="set" if etype == EventType.FACT_SET else "deleted",
        value=payload.get("value"),
        source=source,
        force=force,
        created_at=created_at,
        applied=may_change(current, source, force),
    )
