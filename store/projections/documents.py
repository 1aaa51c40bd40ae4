"""The ``documents`` projection: one JSON value per (user, namespace, key).

A document belongs to one user (``user_id``) or to none (global), as facts do; forgetting
the user erases it (``forgetting.py``). With ``ttl_minutes`` it expires that long after it
was last put or touched. Expiry is decided by the events' own times, never the clock:
applying any document event first deletes the documents that had expired by then, so a
rebuild from the log gives the same rows; readers also skip what has expired since.

A document deleted or expired leaves no value behind: its earlier events (every put
holds a value and maybe a vector) become tombstones, as a forget's do
(``erasing.TOMBSTONE``, ``erased_by`` the event that deleted or expired it). A rebuild
skips them, never creates the document, and gives the same rows. A value overwritten by
a later put stays in the log until its document goes: the document keeps the time of
its first put (``created_at``), which a rebuild reads from that event.
"""

from __future__ import annotations

from datetime import timedelta

import apsw
import orjson

from memq.clock import parse_rfc3339, to_rfc3339
from memq.errors import InvalidEvent
from memq.events import Event, EventType
from memq.store import vectors
from memq.store.effects import Effects
from memq.store.projections.base import Applier
from memq.store.projections.erasing import TOMBSTONE

# Word for word the expression of the unique index documents_by_key (migration 0018).
_KEY = "ifnull(user_id, '') = ifnull(:user, '') AND namespace = :namespace AND key = :key"
# The expressions and WHERE terms of the index events_document_key, word for word.
_TOMBSTONE_EVENTS = f"""
    UPDATE events SET payload = '{TOMBSTONE}', erased_by = :by
    WHERE json_extract(payload, '$.user_id') IS :user
      AND json_extract(payload, '$.namespace') = json(:namespace)
      AND json_extract(payload, '$.key') = :key
      AND type IN ('document.put', 'document.deleted', 'document.touched')
      AND seq < :by AND erased_by IS NULL"""


def apply_put(cur: apsw.Cursor, event: Event, seq: int, effects: Effects) -> None:
    p = event.payload
    expire(cur, event.created_at, seq)
    blob = None
    if p.get("vector_b64") is not None:
        if p.get("dim") is None or p.get("model") is None:
            raise InvalidEvent("document.put: a vector needs its model and dim")
        blob = vectors.model_vector(p["vector_b64"], p["dim"], p["model"])
    ttl = p.get("ttl_minutes")
    cur.execute(
        """INSERT INTO documents (namespace, key, user_id, value, created_at, updated_at,
                                  ttl_minutes, expires_at, embedding, embedding_model, seq)
           VALUES (:namespace, :key, :user, :value, :at, :at, :ttl, :expires, :blob, :model,
                   :seq)
           ON CONFLICT (ifnull(user_id, ''), namespace, key) DO UPDATE SET
               value = excluded.value, updated_at = excluded.updated_at,
               ttl_minutes = excluded.ttl_minutes, expires_at = excluded.expires_at,
               embedding = excluded.embedding, embedding_model = excluded.embedding_model,
               seq = excluded.seq""",
        {**_names(event), "value": orjson.dumps(p["value"]).decode(), "at": event.created_at,
         "ttl": ttl, "expires": _expiry(event.created_at, ttl), "blob": blob,
         "model": p.get("model") if blob is not None else None, "seq": seq},
    )


def apply_deleted(cur: apsw.Cursor, event: Event, seq: int, effects: Effects) -> None:
    expire(cur, event.created_at, seq)
    names = _names(event)
    cur.execute(f"DELETE FROM documents WHERE {_KEY}", names)
    cur.execute(_TOMBSTONE_EVENTS, {**names, "by": seq})


def apply_touched(cur: apsw.Cursor, event: Event, seq: int, effects: Effects) -> None:
    """Restart the time to live of a document that has one (and has not expired)."""
    expire(cur, event.created_at, seq)
    row = cur.execute(f"SELECT ttl_minutes FROM documents WHERE {_KEY}",
                      _names(event)).fetchone()
    if row is not None and row[0] is not None:
        cur.execute(f"UPDATE documents SET expires_at = :expires WHERE {_KEY}",
                    {**_names(event), "expires": _expiry(event.created_at, row[0])})


def expire(cur: apsw.Cursor, at: str, seq: int) -> int:
    """Delete the documents expired at ``at`` and empty their events, for the event at
    ``seq`` (a document event, or retention); returns how many events."""
    gone = cur.execute("DELETE FROM documents WHERE expires_at <= ? "
                       "RETURNING user_id, namespace, key", (at,)).fetchall()
    emptied = 0
    for user, namespace, key in gone:
        cur.execute(_TOMBSTONE_EVENTS,
                    {"user": user, "namespace": namespace, "key": key, "by": seq})
        emptied += cur.getconnection().changes()
    return emptied


def _expiry(at: str, ttl_minutes: float | None) -> str | None:
    if ttl_minutes is None:
        return None
    return to_rfc3339(parse_rfc3339(at) + timedelta(minutes=ttl_minutes))


def _names(event: Event) -> dict[str, str | None]:
    p = event.payload
    return {"namespace": namespace_text(p["namespace"]), "key": p["key"],
            "user": p.get("user_id")}


def namespace_text(labels: list[str] | tuple[str, ...]) -> str:
    """The stored form of a namespace: its labels as a JSON array."""
    return orjson.dumps(list(labels)).decode()


APPLIERS: dict[str, Applier] = {
    EventType.DOCUMENT_PUT: apply_put,
    EventType.DOCUMENT_DELETED: apply_deleted,
    EventType.DOCUMENT_TOUCHED: apply_touched,
}
