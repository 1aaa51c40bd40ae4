"""PendingWrites: this client's uncommitted writes, until the writer has passed them."""

from __future__ import annotations

from typing import Any

import pytest

from memq.clock import uuid7
from memq.events import Event, EventType
from memq.producers import pending as pending_module
from memq.producers.outbox import Position, Ticket
from memq.producers.pending import PendingWrites


def event(etype: str, **payload: Any) -> Event:
    return Event(id=uuid7(), type=etype, session_id=None, created_at="t", payload=payload)


class CommitPosition:
    """The writer's commit position as a test sets it, and how often it was read."""

    def __init__(self, value: Position | None = None) -> None:
        self.value = value
        self.reads = 0

    def __call__(self) -> Position | None:
        self.reads += 1
        return self.value


def sent(at: int | None) -> Ticket:
    return Ticket("x", None if at is None else (at, 0))


def test_only_overlaid_kinds_are_kept() -> None:
    writes = PendingWrites(CommitPosition())
    writes.track(sent(1), event(EventType.MESSAGE_APPENDED, message_id="m"))
    writes.track(sent(2), event(EventType.MACRO_OBSERVED, tool="ls", args={}))
    assert len(writes) == 0
    writes.track(sent(3), event(EventType.FACT_SET, category="c", key="k"))
    assert len(writes) == 1


def test_redis_is_asked_only_while_something_of_that_kind_is_pending() -> None:
    position = CommitPosition()
    writes = PendingWrites(position)
    assert writes.live([EventType.FACT_SET]) == []
    writes.track(sent(1), event(EventType.PREFIX_ALLOWED, prefix="ls"))
    assert writes.live([EventType.FACT_SET]) == []
    assert position.reads == 0
    assert len(writes.live([EventType.PREFIX_ALLOWED])) == 1
    assert position.reads == 1


def test_events_the_writer_passed_are_dropped_the_others_kept_in_order() -> None:
    position = CommitPosition((5, 0))
    writes = PendingWrites(position)
    done = event(EventType.FACT_SET, category="c", key="done")
    later = event(EventType.FACT_SET, category="c", key="later")
    buffered = event(EventType.FACT_DELETED, category="c", key="buffered")
    writes.track(sent(5), done)
    writes.track(sent(6), later)
    writes.track(sent(None), buffered)  # still in a batched() buffer
    assert writes.live([EventType.FACT_SET, EventType.FACT_DELETED]) == [later, buffered]
    assert len(writes) == 2


def test_nothing_is_dropped_while_redis_cannot_tell() -> None:
    writes = PendingWrites(CommitPosition(None))
    writes.track(sent(1), event(EventType.TASK_DELETED, task_id="t"))
    assert len(writes.live([EventType.TASK_DELETED])) == 1


def test_a_failed_send_and_a_rejection_are_dropped() -> None:
    writes = PendingWrites(CommitPosition(None))
    failed = sent(None)
    failed.failed = True
    rejected = event(EventType.FACT_SET, category="c", key="r")
    writes.track(failed, event(EventType.FACT_SET, category="c", key="f"))
    writes.track(sent(2), rejected)
    writes.drop({rejected.id})
    assert writes.live([EventType.FACT_SET]) == []


def test_the_oldest_are_forgotten_beyond_the_bound(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(pending_module, "MAX_PENDING", 3)
    writes = PendingWrites(CommitPosition(None))
    events = [event(EventType.FACT_SET, category="c", key=str(i)) for i in range(5)]
    for i, each in enumerate(events):
        writes.track(sent(i), each)
    assert writes.live([EventType.FACT_SET]) == events[2:]
