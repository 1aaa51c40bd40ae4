"""The ``facts`` projection: one current value per (category, key), with the user's guard.

The guard: a fact whose current value was set by the user is changed or deleted by an
agent (consolidation writes as an agent too) only when the event says ``force``. A
guarded write is still an accepted event — it stays in the log and in
``fact_history`` as not applied — but leaves the row as it was. ``created_at`` is the
time of the event that first created the row, ``updated_at`` that of the last applied
change; both come from the events, so a rebuild gives the same rows.
"""

from __future__ import annotations

import apsw

from memq.errors import InvalidEvent
from memq.events import Event, EventType, check_identifier
from store.effects import Effects
from store.projections.base import Applier


def may_change(current_source: str | None, source: str | None, force: bool) -> bool:
    """Whether a change by ``source`` applies to a fact currently set by ``current_source``.

    ``source`` None is an operator's unconditional deletion; ``current_source`` None means
    no current value.
    """
    return force or source != "agent" or current_source != "user"


def set_fact_row(
    cur: apsw.Cursor, category: str, key: str, value: str, source: str, *, force: bool, at: str
) -> bool:
    """Upsert one fact under the guard; False if a user value was protected."""
    if not may_change(current_source(cur, category, key), source, force):
        return False
    cur.execute(
        """INSERT INTO facts (category, key, value, source, created_at, updated_at)
           VALUES (?, ?, ?, ?, ?, ?)
           ON CONFLICT (category, key) DO UPDATE SET value = excluded.value,
               source = excluded.source, updated_at = excluded.updated_at""",
        (category, key, value, source, at, at),
    )
    return True


def current_source(cur: apsw.Cursor, category: str, key: str) -> str | None:
    row = cur.execute(
        "SELECT source FROM facts WHERE category = ? AND key = ?", (category, key)
    ).fetchone()
    return None if row is None else str(row[0])


def apply_set(cur: apsw.Cursor, event: Event, seq: int, effects: Effects) -> None:
    p = event.payload
    category, key = _names(event)
    set_fact_row(cur, category, key, p["value"], p["source"], force=bool(p.get("force")),
                 at=event.created_at)


def apply_deleted(cur: apsw.Cursor, event: Event, seq: int, effects: Effects) -> None:
    p = event.payload
    category, key = _names(event)
    if may_change(current_source(cur, category, key), p.get("source"), bool(p.get("force"))):
        cur.execute("DELETE FROM facts WHERE category = ? AND key = ?", (category, key))


def _names(event: Event) -> tuple[str, str]:
    # The schema bounds the length; the client's rule (no blank, no control character)
    # is enforced here too, for events that did not come through the client.
    category = check_identifier("category", event.payload["category"], error=InvalidEvent)
    key = check_identifier("key", event.payload["key"], error=InvalidEvent)
    return category, key


APPLIERS: dict[str, Applier] = {
    EventType.FACT_SET: apply_set,
    EventType.FACT_DELETED: apply_deleted,
}
