"""``rejected.dropped``: the person drops events the writer set aside.

``rejected_events`` is the writer's bookkeeping, not a projection of the log: a rebuild
keeps it as it is, so dropping rows that are gone already (a rebuild replaying the drop,
rows a later drop took) is no fault: the event asks that they be gone, and they are.
"""

from __future__ import annotations

import apsw
import orjson

from memq.events import Event, EventType
from memq.store.effects import Effects
from memq.store.projections.base import Applier


def apply_dropped(cur: apsw.Cursor, event: Event, seq: int, effects: Effects) -> None:
    cur.execute("DELETE FROM rejected_events WHERE id IN (SELECT value FROM json_each(?))",
                (orjson.dumps(event.payload["rejected_ids"]).decode(),))


APPLIERS: dict[str, Applier] = {EventType.REJECTED_DROPPED: apply_dropped}
