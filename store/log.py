"""The append-only event log: inserting an event and reading it back in order."""

from __future__ import annotations

from collections.abc import Iterator

import apsw
import orjson

from memq.events import Event


def append_event(cur: apsw.Cursor, event: Event, recorded_at: str) -> int | None:
    """Insert ``event``; return its position, or None if its id is already in the log.

    The unique ``event_id`` is what makes redelivery harmless: no lock, no lookup.
    """
    cur.execute(
        """INSERT INTO events (event_id, type, version, session_id, created_at, recorded_at,
                               payload)
           VALUES (?, ?, ?, ?, ?, ?, ?) ON CONFLICT (event_id) DO NOTHING""",
        (
            event.id,
            event.type,
            event.version,
            event.session_id,
            event.created_at,
            recorded_at,
            orjson.dumps(event.payload).decode(),
        ),
    )
    conn = cur.getconnection()
    if conn.changes() == 0:
        return None
    return conn.last_insert_rowid()


def read_events(conn: apsw.Connection, *, after_seq: int = 0) -> Iterator[tuple[int, Event]]:
    """Every event after ``after_seq``, in log order."""
    rows = conn.execute(
        """SELECT seq, event_id, type, version, session_id, created_at, payload
           FROM events WHERE seq > ? ORDER BY seq""",
        (after_seq,),
    )
    for seq, event_id, etype, version, session_id, created_at, payload in rows:
        yield seq, Event(
            id=event_id,
            type=etype,
            version=version,
            session_id=session_id,
            created_at=created_at,
            payload=orjson.loads(payload),
        )
