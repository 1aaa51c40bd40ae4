"""Projections: the read models the writer keeps in step with the event log.

An applier takes the cursor of the writer's open transaction, the validated event, its
position in the log and the batch's :class:`~store.effects.Effects`. It changes only
projection rows and raises :class:`~memq.errors.InvalidEvent` when the event cannot be
applied (for example, an embedding for a message that does not exist). Appliers read
nothing but the event and the database, never the clock, so a rebuild from the log gives
the same rows.
"""

from __future__ import annotations

from itertools import groupby

import apsw

from memq.errors import InvalidEvent
from memq.events import Event
from memq.store.effects import Effects
from memq.store.projections import (
    consolidation,
    documents,
    facts,
    forgetting,
    keys,
    macros,
    messages,
    prefixes,
    rejected,
    retention,
    sessions,
    tasks,
    webhooks,
)
from memq.store.projections.base import Applier, BatchApplier
from memq.store.write.log import append_event

APPLIERS: dict[str, Applier] = {
    **messages.APPLIERS,
    **tasks.APPLIERS,
    **facts.APPLIERS,
    **macros.APPLIERS,
    **prefixes.APPLIERS,
    **consolidation.APPLIERS,
    **forgetting.APPLIERS,
    **documents.APPLIERS,
    **retention.APPLIERS,
    **keys.APPLIERS,
    **webhooks.APPLIERS,
    **rejected.APPLIERS,
}

BATCH_APPLIERS: dict[str, BatchApplier] = {
    **messages.BATCH_APPLIERS,
}
"""Optional faster appliers for a run of consecutive events of one type."""


def apply_event(cur: apsw.Cursor, event: Event, seq: int, effects: Effects) -> None:
    _project(cur, event, seq, effects)
    sessions.touch(cur, sessions.changes([(seq, event)], skip=effects.tombstoned))


def apply_events(cur: apsw.Cursor, numbered: list[tuple[int, Event]], effects: Effects) -> None:
    """Apply events in log order, handing runs of one type to its batch applier if any."""
    for etype, run in groupby(numbered, key=lambda item: item[1].type):
        batch_applier = BATCH_APPLIERS.get(etype)
        if batch_applier is not None:
            batch_applier(cur, list(run), effects)
            continue
        for seq, event in run:
            _project(cur, event, seq, effects)
    sessions.touch(cur, sessions.changes(numbered, skip=effects.tombstoned))


def _project(cur: apsw.Cursor, event: Event, seq: int, effects: Effects) -> None:
    applier = APPLIERS.get(event.type)
    if applier is None:
        raise InvalidEvent(f"{event.type}: this writer has no projection for it yet")
    applier(cur, event, seq, effects)


def record_event(cur: apsw.Cursor, event: Event, recorded_at: str, effects: Effects) -> bool:
    """Append ``event`` to the log and project it; False if its id was already logged."""
    seq = append_event(cur, event, recorded_at)
    if seq is None:
        return False
    apply_event(cur, event, seq, effects)
    return True
