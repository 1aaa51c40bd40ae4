"""Reading who sent what through which API key (``event_keys``, ``memq audit``)."""

from __future__ import annotations

from dataclasses import dataclass

import apsw


@dataclass(frozen=True)
class AuditEntry:
    seq: int
    recorded_at: str
    type: str
    session_id: str | None
    user_id: str | None
    """The session's owner, or the user the event names; None once forgotten."""
    key_id: str
    key_name: str | None
    erased: bool
    """Forgotten since: its content is gone, the record of it stays."""


def audit(conn: apsw.Connection, *, key_id: str | None = None, user_id: str | None = None,
          limit: int = 100) -> list[AuditEntry]:
    """The newest events sent through keys, ``key_id``'s or reaching ``user_id`` if given."""
    rows = conn.execute(
        """SELECT seq, recorded_at, type, session_id, user_id, key_id, name, erased FROM (
             SELECT e.seq, e.recorded_at, e.type, e.session_id,
                    coalesce(s.user_id, json_extract(e.payload, '$.user_id')) AS user_id,
                    k.key_id, a.name, e.erased_by IS NOT NULL AS erased
             FROM event_keys AS k JOIN events AS e USING (seq)
             LEFT JOIN sessions AS s ON s.session_id = e.session_id
             LEFT JOIN api_keys AS a ON a.id = k.key_id
             WHERE ?1 IS NULL OR k.key_id = ?1)
           WHERE ?2 IS NULL OR user_id = ?2
           ORDER BY seq DESC LIMIT ?3""",
        (key_id, user_id, limit))
    return [AuditEntry(int(seq), str(at), str(etype), _text(session), _text(user), str(key),
                       _text(name), bool(erased))
            for seq, at, etype, session, user, key, name, erased in rows]


def key_of(conn: apsw.Connection, event_id: str) -> str | None:
    """The key a committed event was sent for, or None (none, or not committed)."""
    row = conn.execute("SELECT k.key_id FROM events AS e JOIN event_keys AS k USING (seq) "
                       "WHERE e.event_id = ?", (event_id,)).fetchone()
    return None if row is None else str(row[0])


def _text(value: object) -> str | None:
    return None if value is None else str(value)
