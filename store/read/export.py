"""Reading everything of one user for an export (``memq export``): the events, in log order.

A user's data is the turns and summaries of its sessions, the facts and documents whose
payload names it, and, with ``vectors``, the embeddings of its turns
(:data:`memq.portable.DATA_TYPES`). Forgotten events (their payload erased) are left out:
what was forgotten does not travel.
"""

from __future__ import annotations

from collections.abc import Iterator

import apsw
import orjson

from memq.events import Event
from memq.store.read.hidden import hides, visible

_OWN = f"""
    SELECT e.event_id, e.type, e.version, e.session_id, e.created_at, e.payload
    FROM events AS e
    WHERE e.erased_by IS NULL AND NOT EXISTS (
        SELECT 1 FROM erasing AS x WHERE {hides("e")})
      AND (
        (e.type IN ('message.appended', 'session.consolidated')
         AND e.session_id IN (SELECT session_id FROM sessions WHERE user_id = :user))
        OR (e.session_id IS NULL AND e.type IN ('fact.set', 'fact.deleted', 'document.put',
                                                 'document.deleted', 'document.touched')
            AND json_extract(e.payload, '$.user_id') = :user)
        OR (:vectors AND e.type = 'message.embedded' AND json_extract(e.payload, '$.message_id')
            IN (SELECT id FROM messages WHERE user_id = :user AND {visible()})))
    ORDER BY e.seq"""


def user_events(conn: apsw.Connection, user_id: str, *, vectors: bool) -> Iterator[Event]:
    """The events of ``user_id`` (a stored id) an export carries, oldest first."""
    for event_id, etype, version, session_id, created_at, payload in conn.execute(
            _OWN, {"user": user_id, "vectors": vectors}):
        yield Event(id=event_id, type=etype, version=version, session_id=session_id,
                    created_at=created_at, payload=orjson.loads(payload))
