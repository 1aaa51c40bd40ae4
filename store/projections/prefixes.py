"""The ``terminal_allowed_prefixes`` projection: the "Always allow" approvals in force,
each of one tenant (the default tenant's when the event names none).

A prefix is stored in its normal form (:func:`memq.approvals.normalize_prefix`); an event
carrying anything else is rejected, so an operator sees it instead of it silently
approving nothing. Allowing twice keeps the first ``created_at``; revoking a prefix that
is not allowed changes nothing.
"""

from __future__ import annotations

import apsw

from memq.approvals import normalize_prefix
from memq.errors import InvalidEvent, ValidationError
from memq.events import Event, EventType
from memq.store.effects import Effects
from memq.store.projections.base import Applier
from memq.tenants import DEFAULT


def apply_allowed(cur: apsw.Cursor, event: Event, seq: int, effects: Effects) -> None:
    cur.execute(
        """INSERT INTO terminal_allowed_prefixes (tenant, prefix, created_at) VALUES (?, ?, ?)
           ON CONFLICT (tenant, prefix) DO NOTHING""",
        (_tenant(event), _prefix(event), event.created_at),
    )


def apply_revoked(cur: apsw.Cursor, event: Event, seq: int, effects: Effects) -> None:
    cur.execute("DELETE FROM terminal_allowed_prefixes WHERE tenant = ? AND prefix = ?",
                (_tenant(event), _prefix(event)))


def _tenant(event: Event) -> str:
    return str(event.payload.get("tenant", DEFAULT))


def _prefix(event: Event) -> str:
    try:
        # runners_ok: an approval logged before RUNNERS existed still replays (it approves
        # nothing: the matcher refuses it), and can be revoked
        return normalize_prefix(event.payload["prefix"], runners_ok=True)
    except ValidationError as exc:
        raise InvalidEvent(f"{event.type}: {exc}") from None


APPLIERS: dict[str, Applier] = {
    EventType.PREFIX_ALLOWED: apply_allowed,
    EventType.PREFIX_REVOKED: apply_revoked,
}
