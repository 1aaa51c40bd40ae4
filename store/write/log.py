"""The append-only event log: inserting an event and reading it back in order."""

from __future__ import annotations

from collections.abc import Collection, Iterator

import apsw
import orjson

from memq.errors import InvalidEvent
from memq.events import Event
from memq.store.write import bulk


def append_event(cur: apsw.Cursor, event: Event, recorded_at: str) -> int | None:
    """Insert ``event``; return its position, or None if its id is already in the log
    (:func:`check_redelivered` tells a redelivery from a reused id).

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


def check_redelivered(cur: apsw.Cursor, event: Event) -> None:
    """For an event whose id is already logged: raise unless it is the same event again.

    The writer calls this for inbox entries. Its own local paths (the legacy upgrade, the
    config tasks) rely on a known id alone meaning "done already".
    """
    stored = _stored(cur, [event.id]).get(event.id)
    if stored is not None:
        _check_same(event, stored)


def read_events(
    conn: apsw.Connection, *, after_seq: int = 0, types: Collection[str] | None = None,
    before_seq: int | None = None,
) -> Iterator[tuple[int, Event]]:
    """Every event after ``after_seq`` (and before ``before_seq``, if given; of ``types``
    only, if given), in log order.

    Tombstones (events whose data was forgotten, ``erased_by`` set) are left out: what
    they said is gone, and a replay must give what the live projections hold now.
    """
    rows = conn.execute(
        """SELECT seq, event_id, type, version, session_id, created_at, payload
           FROM events WHERE seq > ?1 AND (?3 IS NULL OR seq < ?3) AND erased_by IS NULL
             AND (?2 IS NULL OR type IN (SELECT value FROM json_each(?2)))
           ORDER BY seq""",
        (after_seq, None if types is None else orjson.dumps(sorted(types)).decode(),
         before_seq),
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

    An event whose id is known must be a redelivery of the same event: another event under
    a used id raises :class:`InvalidEvent` (the batch is then applied one by one).

    Positions are assigned here (max + 1, ...), as SQLite would: the writer holds the only
    write transaction, so nothing can take a position in between.
    """
    if not events:
        return []
    known = _stored(cur, [e.id for e in events])
    fresh: list[Event] = []
    for event in events:
        stored = known.get(event.id)
        if stored is not None:
            _check_same(event, stored)
            continue
        known[event.id] = _content(event)  # the same event twice in one batch is applied once
        fresh.append(event)
    base = int(cur.execute("SELECT coalesce(max(seq), 0) FROM events").fetchall()[0][0])  # type: ignore[arg-type]
    numbered = [(base + i, event) for i, event in enumerate(fresh, start=1)]
    bulk.insert(cur, _INSERT_MANY, (
        (seq, e.id, e.type, e.version, e.session_id, e.created_at,
         orjson.dumps(e.payload).decode()) for seq, e in numbered), recorded_at)
    return numbered


Content = tuple[str, int, str | None, str, str | None]
"""What must match for an event id seen before to be a redelivery: type, version, session,
created_at and the payload as canonical JSON."""


def _content(event: Event) -> Content:
    payload = orjson.dumps(event.payload, option=orjson.OPT_SORT_KEYS).decode()
    return event.type, event.version, event.session_id, event.created_at, payload


def _stored(cur: apsw.Cursor, ids: list[str]) -> dict[str, Content]:
    """The logged content of those of ``ids`` already in the log (a tombstone's payload
    is None: it was erased, and only its envelope can be compared)."""
    rows = cur.execute(
        """SELECT event_id, type, version, session_id, created_at, payload, erased_by
           FROM events WHERE event_id IN (SELECT value FROM json_each(?))""",
        (orjson.dumps(ids).decode(),),
    )
    return {
        str(event_id): (str(etype), int(version), session, str(created), None if erased
                        else orjson.dumps(orjson.loads(payload), option=orjson.OPT_SORT_KEYS
                                          ).decode())
        for event_id, etype, version, session, created, payload, erased in rows
    }


def _check_same(event: Event, stored: Content) -> None:
    """A redelivered event is a no-op; another event under a used id is refused, not
    dropped, so its sender learns that it was not applied. A redelivery of an event that
    was forgotten since is a no-op too (its payload is gone, so only the envelope counts):
    refusing it would keep the forgotten content among the rejected."""
    mine = _content(event)
    if stored[4] is None:
        mine = (*mine[:4], None)
    if mine != stored:
        raise InvalidEvent(
            f"event id {event.id} is already in the log with different content; "
            "an event id must not be reused"
        )


_INSERT_MANY = f"""
    INSERT INTO events (seq, event_id, type, version, session_id, created_at, payload,
                        recorded_at)
    SELECT {bulk.select_columns(7)}, ?2 FROM json_each(?1)"""
