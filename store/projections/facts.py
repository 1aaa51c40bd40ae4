"""The ``facts`` projection: one current value per (user, category, key), with the guard.

A fact belongs to one user (``user_id``) or to none: a global fact, ``user_id`` NULL.

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
from memq.store.effects import Effects
from memq.store.projections.base import Applier
from memq.store.projections.fact_versions import begin as begin_version
from memq.store.projections.fact_versions import end as end_version
from memq.store.write.log import read_events


def may_change(current_source: str | None, source: str | None, force: bool) -> bool:
    """Whether a change by ``source`` applies to a fact currently set by ``current_source``.

    ``source`` None is an operator's unconditional deletion; ``current_source`` None means
    no current value.
    """
    return force or source != "agent" or current_source != "user"


# Word for word the expression of the unique index facts_by_key (migration 0014).
_KEY = "ifnull(user_id, '') = ifnull(:user, '') AND category = :category AND key = :key"


def set_fact_row(
    cur: apsw.Cursor, category: str, key: str, value: str, source: str, *, force: bool,
    at: str, user_id: str | None = None, seq: int | None = None,
) -> bool:
    """Upsert one fact under the guard; False if a user value was protected.

    A new fact's id is ``seq``, the log position of the event that created it (unless a
    fact imported from the seed holds that number): a number the log alone decides, so
    it is the same after a rebuild even when other facts were forgotten before it.
    """
    if not may_change(current_source(cur, category, key, user_id), source, force):
        return False
    if seq is not None and cur.execute("SELECT 1 FROM facts WHERE id = ?", (seq,)).fetchone():
        seq = None
    cur.execute(
        """INSERT INTO facts (id, category, key, value, source, created_at, updated_at,
                              user_id)
           VALUES (?, ?, ?, ?, ?, ?, ?, ?)
           ON CONFLICT (ifnull(user_id, ''), category, key) DO UPDATE SET
               value = excluded.value, source = excluded.source,
               updated_at = excluded.updated_at""",
        (seq, category, key, value, source, at, at, user_id),
    )
    return True


def current_source(
    cur: apsw.Cursor, category: str, key: str, user_id: str | None = None
) -> str | None:
    row = cur.execute(f"SELECT source FROM facts WHERE {_KEY}",
                      {"user": user_id, "category": category, "key": key}).fetchone()
    return None if row is None else str(row[0])


def apply_set(cur: apsw.Cursor, event: Event, seq: int, effects: Effects) -> None:
    p = event.payload
    names = _names(event)
    category, key, user = names
    if set_fact_row(cur, category, key, p["value"], p["source"], force=bool(p.get("force")),
                    at=event.created_at, user_id=user, seq=seq):
        begin_version(cur, seq, names, p["value"], p["source"],
                            valid_from=p.get("valid_from") or event.created_at,
                            at=event.created_at)


def apply_deleted(cur: apsw.Cursor, event: Event, seq: int, effects: Effects) -> None:
    p = event.payload
    names = _names(event)
    category, key, user = names
    if may_change(current_source(cur, category, key, user), p.get("source"),
                  bool(p.get("force"))):
        cur.execute(f"DELETE FROM facts WHERE {_KEY}",
                    {"user": user, "category": category, "key": key})
        end_version(cur, names, valid_to=p.get("valid_to") or event.created_at,
                          at=event.created_at)


def apply_imported(cur: apsw.Cursor, event: Event, seq: int, effects: Effects) -> None:
    """One row of the legacy ``facts`` table, as it was (global): its id, source and both
    times."""
    p = event.payload
    category, key, _ = _names(event)
    try:
        cur.execute(
            """INSERT INTO facts (id, category, key, value, source, created_at, updated_at)
               VALUES (?, ?, ?, ?, ?, ?, ?)""",
            (p["fact_id"], category, key, p["value"], p["source"], p["created_at"],
             p["updated_at"]),
        )
    except apsw.ConstraintError as exc:
        raise InvalidEvent(f"fact {p['fact_id']} ({category}/{key}) already exists") from exc
    begin_version(cur, seq, (category, key, None), p["value"], p["source"],
                        valid_from=p["updated_at"], at=event.created_at)


def _names(event: Event) -> tuple[str, str, str | None]:
    # The schema bounds the length; the client's rule (no blank, no control character)
    # is enforced here too, for events that did not come through the client.
    category = check_identifier("category", event.payload["category"], error=InvalidEvent)
    key = check_identifier("key", event.payload["key"], error=InvalidEvent)
    user = event.payload.get("user_id")
    if user is not None:
        user = check_identifier("user_id", user, error=InvalidEvent)
    return category, key, user


APPLIERS: dict[str, Applier] = {
    EventType.FACT_SET: apply_set,
    EventType.FACT_DELETED: apply_deleted,
    EventType.FACT_IMPORTED: apply_imported,
}


def relearn(cur: apsw.Cursor) -> int:
    """Rebuild this projection alone from the log (a migration whose rule the rows must
    follow); returns how many events were replayed."""
    cur.execute("DELETE FROM facts")
    cur.execute("DELETE FROM fact_versions")
    effects = Effects()  # facts owe no follow-up
    count = 0
    for seq, event in read_events(cur.getconnection(), types=tuple(APPLIERS)):
        APPLIERS[event.type](cur, event, seq, effects)
        count += 1
    return count
