"""The ``webhooks`` projection: the webhooks the person registered, and which are removed.

Adding one that exists, or removing one that does not, is refused: each would mean the
person's command was misread. A removed webhook keeps its row (its deliveries name it).
"""

from __future__ import annotations

import apsw
import orjson

from memq.errors import InvalidEvent
from memq.events import Event, EventType
from memq.store.effects import Effects
from memq.store.projections.base import Applier


def apply_added(cur: apsw.Cursor, event: Event, seq: int, effects: Effects) -> None:
    p = event.payload
    if cur.execute("SELECT 1 FROM webhooks WHERE id = ?", (p["webhook_id"],)).fetchone():
        raise InvalidEvent(f"webhook.added: webhook {p['webhook_id']} exists already")
    cur.execute(
        """INSERT INTO webhooks (id, url, types, user_id, secret, after, created_at, tenant)
           VALUES (?, ?, ?, ?, ?, ?, ?, ?)""",
        (p["webhook_id"], p["url"], orjson.dumps(p["types"]).decode(), p.get("user_id"),
         p["secret"], seq, event.created_at, p.get("tenant")))


def apply_removed(cur: apsw.Cursor, event: Event, seq: int, effects: Effects) -> None:
    webhook_id = event.payload["webhook_id"]
    cur.execute("UPDATE webhooks SET removed_at = ifnull(removed_at, ?) WHERE id = ?",
                (event.created_at, webhook_id))
    if cur.getconnection().changes() == 0:
        raise InvalidEvent(f"webhook.removed: no webhook {webhook_id}")


APPLIERS: dict[str, Applier] = {
    EventType.WEBHOOK_ADDED: apply_added,
    EventType.WEBHOOK_REMOVED: apply_removed,
}
