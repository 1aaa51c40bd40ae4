"""The event log itself: positions, duplicates and reused ids, one event or a batch at a time.

The writer's fast path (``append_events``) falls back to the careful path on any error, so
a broken fast path would still give the right rows, only slowly: these tests call the log
directly, and check that a redelivery takes the fast path.
"""

from __future__ import annotations

import pytest

from memq.errors import InvalidEvent
from memq.events import Event, EventType
from memq.store.write import batch
from memq.store.write.log import append_event, append_events, check_redelivered, read_events
from tests.store.eventlog import EventLog, at, event

NOW = "2026-03-01T10:00:00.000000Z"



def fact(value: str, key: str = "tz") -> Event:
    return event(EventType.FACT_SET, {"category": "user", "key": key, "value": value,
                                      "source": "agent"}, created_at=at(1))


def test_a_batch_gets_positions_after_the_last_and_skips_what_is_known(log: EventLog) -> None:
    known, fresh, other = fact("UTC"), fact("CET", "zone"), fact("x", "k")
    cur = log.conn.cursor()
    assert append_event(cur, known, NOW) == 1
    numbered = append_events(cur, [fresh, known, other, fresh], NOW)
    assert [(seq, e.id) for seq, e in numbered] == [(2, fresh.id), (3, other.id)]
    assert log.rows("SELECT seq, event_id FROM events ORDER BY seq") == [
        (1, known.id), (2, fresh.id), (3, other.id)]
    assert append_events(cur, [], NOW) == []
    assert append_events(cur, [known, fresh], NOW) == []


def test_a_reused_id_is_refused_and_a_redelivery_is_not(log: EventLog) -> None:
    original = fact("UTC")
    cur = log.conn.cursor()
    append_event(cur, original, NOW)
    # The same event, its payload's keys in another order: a redelivery.
    same = Event(original.id, original.type, None, original.created_at,
                 dict(reversed(list(original.payload.items()))))
    assert append_events(cur, [same], NOW) == []
    check_redelivered(cur, same)
    reused = Event(original.id, original.type, None, original.created_at,
                   {**original.payload, "value": "CET"})
    with pytest.raises(InvalidEvent, match=f"event id {original.id} is already in the log "
                                           "with different content"):
        append_events(cur, [reused], NOW)
    with pytest.raises(InvalidEvent, match="already in the log with different content"):
        check_redelivered(cur, reused)
    for field, value in (("created_at", at(2)), ("session_id", "s9"), ("version", 2)):
        changed = Event(**{**original.__dict__, field: value})
        with pytest.raises(InvalidEvent):
            append_events(cur, [changed], NOW)
    assert append_event(cur, reused, NOW) is None  # one event at a time: known is known


def test_the_log_reads_back_in_order_from_a_position(log: EventLog) -> None:
    events = [fact(str(i), f"k{i}") for i in range(4)]
    log.send(*events)
    assert [(seq, e.id) for seq, e in read_events(log.conn)] == [
        (i + 1, e.id) for i, e in enumerate(events)]
    assert [e.payload for _, e in read_events(log.conn, after_seq=2)] == [
        events[2].payload, events[3].payload]


def test_a_redelivered_batch_takes_the_fast_path(
    log: EventLog, monkeypatch: pytest.MonkeyPatch
) -> None:
    events = [fact("UTC"), fact("CET", "zone")]
    log.send(*events)

    def careful(*args: object) -> None:
        raise AssertionError("a redelivery must not need the careful path")

    monkeypatch.setattr(batch, "apply_careful", careful)
    result = log.send(*events, events[0])
    assert (result.applied, result.duplicates) == (0, 3)
    fresh = fact("x", "k")
    assert log.send(fresh, *events).applied == 1
