"""Dropping what the writer set aside: the person, having read why, drops rejected events
(``rejected.dropped``, admin only) rather than replay them. A drop is an event: the log
says who dropped what, and when."""

from __future__ import annotations

from collections.abc import Sequence

from memq.errors import NotFound, ValidationError
from memq.events import EventType
from memq.events.rules import rejected_ids as problem_of
from memq.printable import shown
from memq.producers.keys import KeysOps
from memq.producers.ops import Op, Read
from memq.store.read.rejected import existing


class RejectedOps(KeysOps):
    def _drop_rejected_op(self, rejected_ids: Sequence[int]) -> Op[str]:
        yield from self._person_op("dropping rejected events")
        ids = list(rejected_ids) if isinstance(rejected_ids, (list, tuple)) else None
        problem = "must be a list of ids" if ids is None else problem_of(ids)
        if ids is None or problem is not None:
            raise ValidationError(f"rejected_ids {problem}, got {shown(rejected_ids):.60}")
        found: list[int] = yield Read(existing, (ids,))
        missing = sorted(set(ids) - set(found))
        if missing:
            raise NotFound(f"no rejected event with id {missing[0]}")
        event_id: str = yield from self._send_op(EventType.REJECTED_DROPPED,
                                                 {"rejected_ids": ids})
        return event_id
