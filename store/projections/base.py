"""The shape of an applier, shared by every projection module."""

from __future__ import annotations

from collections.abc import Callable

import apsw

from memq.events import Event
from memq.store.effects import Effects

Applier = Callable[[apsw.Cursor, Event, int, Effects], None]
"""(cursor of the writer's transaction, event, its position in the log, the batch's effects)."""

BatchApplier = Callable[[apsw.Cursor, list[tuple[int, Event]], Effects], None]
"""A faster applier for a run of consecutive events of one type, with their positions."""
