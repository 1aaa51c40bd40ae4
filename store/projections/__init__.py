"""Projections: the read models the writer keeps in step with the event log.

An applier takes the cursor of the writer's open transaction, the validated event, its
position in the log and the batch's :class:`~store.effects.Effects`. It changes only
projection rows and raises :class:`~memq.errors.InvalidEvent` when the event cannot be
applied (for example, an embedding for a message that does not exist). Appliers read
nothing but the event and the database, never the clock, so a rebuild from the log gives
the same rows.
"""

from __future__ import annotations

from collections.abc import Callable

import apsw

from memq.errors import InvalidEvent
from memq.events import Event
from store.effects import Effects
from store.projections import consolidation, messages

Applier = Callable[[apsw.Cursor, Event, int, Effects], None]

APPLIERS: dict[str, Applier] = {
    **messages.APPLIERS,
    **consolidation.APPLIERS,
}


def apply_event(cur: apsw.Cursor, event: Event, seq: int, effects: Effects) -> None:
    applier = APPLIERS.get(event.type)
    if applier is None:
        raise InvalidEvent(f"{event.type}: this writer has no projection for it yet")
    applier(cur, event, seq, effects)
