"""The ``api_keys`` projection: the keys the person minted, and which are revoked.

Creating a key that exists, or revoking one that does not, is refused: each would mean
the person's command was misread. Revoking twice keeps the first time.
"""

from __future__ import annotations

import apsw
import orjson

from memq.errors import InvalidEvent
from memq.events import Event, EventType
from memq.store.effects import Effects
from memq.store.projections.base import Applier
from memq.tenants import DEFAULT


def apply_created(cur: apsw.Cursor, event: Event, seq: int, effects: Effects) -> None:
    p = event.payload
    if cur.execute("SELECT 1 FROM api_keys WHERE id = ?", (p["key_id"],)).fetchone():
        raise InvalidEvent(f"key.created: key {p['key_id']} exists already")
    cur.execute(
        """INSERT INTO api_keys (id, name, secret_sha256, users, agents, rights, expires_at,
                                 units_per_s, concurrent, created_at, tenant)
           VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)""",
        (p["key_id"], p["name"], p["secret_sha256"], _json(p.get("users")),
         _json(p.get("agents")), orjson.dumps(p["rights"]).decode(), p.get("expires_at"),
         p.get("units_per_s"), p.get("concurrent"), event.created_at,
         p.get("tenant", DEFAULT)),
    )


def apply_revoked(cur: apsw.Cursor, event: Event, seq: int, effects: Effects) -> None:
    key_id = event.payload["key_id"]
    cur.execute("UPDATE api_keys SET revoked_at = ifnull(revoked_at, ?) WHERE id = ?",
                (event.created_at, key_id))
    if cur.getconnection().changes() == 0:
        raise InvalidEvent(f"key.revoked: no key {key_id}")


def _json(value: list[str] | None) -> str | None:
    return None if value is None else orjson.dumps(sorted(value)).decode()


APPLIERS: dict[str, Applier] = {
    EventType.KEY_CREATED: apply_created,
    EventType.KEY_REVOKED: apply_revoked,
}
