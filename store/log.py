"""The append-only event log: inserting an event and reading it back in order."""

from __future__ import annotations

from collections.abc import Iterator

import apsw
import orjson

from memq.events import Event
from store import bulk


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


def append_events(
    cur: apsw.Cursor, events: list[Event], recorded_at: str
) -> list[tuple[int, Event]]:
    """Insert the events not yet in the log with one statement; return them with positions.

    Positions are assigned here (max + 1, ...), as SQLite would: the writer holds the only
    write transaction, so nothing can take a position in between.
    """
    if not events:
        return []
    ids = orjson.dumps([e.id for e in events]).decode()
    known = {row[0] for row in cur.execute(
        "SELECT event_id FROM events WHERE event_id IN (SELECT value FROM json_each(?))", (ids,)
    )}
    fresh: list[Event] = []
    for event in events:
        if event.id not in known:
            known.add(event.id)  # the same event twice in one batch is applied once
            fresh.append(event)
    base = int(cur.execute("SELECT coalesce(max(seq), 0) FROM events").fetchall()[0][0])  # type: ignore[arg-type]
    numbered = [(base + i, event) for i, event in enumerate(fresh, start=1)]
    bulk.insert(cur, _INSERT_MANY, (
        (seq, e.id, e.type, e.version, e.session_id, e.created_at,
         orjson.dumps(e.payload).decode()) for seq, e in numbered), recorded_at)
    return numbered


_INSERT_MANY = f"""
    INSERT INTO events (seq, event_id, type, version, session_id, created_at, payload,
                        recorded_at)
    SELECT {bulk.select_columns(7)}, ?2 FROM json_each(?1)"""
