"""Applying a batch: a redelivered event is a no-op on the fast path and on the careful one.

The careful path (one savepoint per event) runs when the fast path meets an event it
cannot apply; it inserts each event on its own, so it relies on the log's duplicate check
event by event. A redelivered batch that also holds a bad event must apply nothing twice.
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

import orjson
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from memq import names
from memq.authority import ROLE_OF_STREAM, type_refusal
from memq.clock import to_rfc3339, uuid7
from memq.events import Event, EventType
from memq.store.projections.macros import content_id
from memq.toolcalls import args_pattern
from tests.store.eventlog import EventLog, at, event

LEARNED = content_id("read_file", args_pattern({"path": "a.py"}), "edit_file")
"""The id of the macro first_batch's two calls teach (its specific pattern)."""


def first_batch() -> list[Event]:
    """Two tool calls (one learned macro), its use, a message, a fact."""
    return [
        event(EventType.MACRO_OBSERVED, {"tool": "read_file", "args": {"path": "a.py"}},
              session="s1", created_at=at(1)),
        event(EventType.MACRO_OBSERVED, {"tool": "edit_file", "args": {"path": "a.py"}},
              session="s1", created_at=at(2)),
        event(EventType.MACRO_USED, {"macro_id": LEARNED}, created_at=at(3)),
        message("hello", at(4)),
        event(EventType.FACT_SET, {"category": "user", "key": "tz", "value": "UTC",
                                   "source": "agent"}, created_at=at(5)),
    ]


def message(text: str, when: str) -> Event:
    return event(EventType.MESSAGE_APPENDED, {"message_id": uuid7(), "role": "user",
                                              "content": text, "importance": 0.5},
                 session="s1", created_at=when)


def state(log: EventLog) -> dict[str, Any]:
    return {
        "macros": log.rows("SELECT trigger_tool, trigger_args_pattern, next_tool, "
                           "transition_count, trigger_count, used_count FROM macros ORDER BY 1, 2"),
        "messages": log.rows("SELECT content FROM messages ORDER BY seq"),
        "facts": log.rows("SELECT category, key, value, updated_at FROM facts"),
        "events": log.rows("SELECT count(*) FROM events"),
    }


def test_a_redelivered_batch_is_a_no_op_on_the_fast_path(log: EventLog) -> None:
    events = first_batch()
    assert log.send(*events).applied == 5
    before = state(log)
    result = log.send(*events)
    assert (result.applied, result.duplicates, result.rejected) == (0, 5, 0)
    assert state(log) == before


def test_a_redelivered_event_is_not_applied_again_on_the_careful_path(log: EventLog) -> None:
    events = first_batch()
    log.send(*events)
    before = state(log)
    assert before["macros"] == [("read_file", "*", "edit_file", 1, 1, 0),
                                ("read_file", '{"path":"<path>"}', "edit_file", 1, 1, 1)]
    # The same events again, with a new one and one the writer cannot apply (a use of a
    # macro that does not exist), which sends the batch down the careful path.
    new = message("a new turn", at(6))
    bad = event(EventType.MACRO_USED, {"macro_id": 999}, created_at=at(7))
    result = log.send(*events, new, bad)
    assert (result.applied, result.duplicates, result.rejected) == (1, 5, 1)
    assert result.size == 7  # every entry is counted once, whatever became of it
    assert log.rejections() == ["unknown macro 999"]
    after = state(log)
    assert after["macros"] == before["macros"]  # counted once, used once
    assert after["facts"] == before["facts"]
    assert after["messages"] == [*before["messages"], ("a new turn",)]
    assert after["events"] == [(before["events"][0][0] + 1,)]
    log.assert_rebuild_equal()


def test_the_same_event_twice_in_one_careful_batch_is_applied_once(log: EventLog) -> None:
    use = event(EventType.MACRO_USED, {"macro_id": LEARNED}, created_at=at(3))
    log.send(*first_batch()[:2])
    bad = event(EventType.MACRO_USED, {"macro_id": 999}, created_at=at(7))
    result = log.send(use, use, bad)
    assert (result.applied, result.duplicates, result.rejected) == (1, 1, 1)
    assert {row[5] for row in state(log)["macros"]} == {1, 0}


# -- a malformed entry from a role that may never send its type -------------------------------


def _raw(etype: Any, payload: Any) -> bytes:
    return orjson.dumps({"id": uuid7(), "type": etype, "v": 1, "session_id": "s1",
                         "created_at": at(1), "payload": payload})


def test_an_agents_runner_approval_is_refused_for_who_sent_it(log: EventLog) -> None:
    # "sudo" is also no approvable prefix; what an agent is told first is that approvals
    # are the person's.
    log.send(_raw("prefix.allowed", {"prefix": "sudo"}), stream=names.INBOX_STREAM)
    assert log.rejections() == [
        "prefix.allowed may only come from admin, not from an agent (memq:inbox)"]


def test_a_malformed_event_of_the_senders_own_type_says_what_is_wrong(log: EventLog) -> None:
    log.send(_raw("message.appended", {"role": "user"}), stream=names.INBOX_STREAM)
    [reason] = log.rejections()
    assert "may only come from" not in reason
    assert "message_id" in reason


_JSON = st.recursive(st.none() | st.booleans() | st.integers(-(2**53), 2**53) | st.text(max_size=8),
                     lambda inner: st.lists(inner, max_size=3)
                     | st.dictionaries(st.text(max_size=8), inner, max_size=3), max_leaves=8)


@settings(max_examples=150, deadline=None, database=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(stream=st.sampled_from([s for s in names.INBOX_STREAMS  # the keys' one needs a key
                               if s != names.KEYS_INBOX_STREAM]),
       etype=st.sampled_from(sorted(EventType)) | _JSON, payload=_JSON)
def test_a_refused_entry_names_the_authority_exactly_when_its_role_may_never_send_it(
    log: EventLog, stream: str, etype: Any, payload: Any
) -> None:
    before = len(log.rejections())
    result = log.send(_raw(etype, payload), stream=stream)
    reasons = log.rejections()[before:]
    if type_refusal(ROLE_OF_STREAM[stream], etype) is not None:
        # Malformed or not, the entry is refused for who sent it (a well-formed one may
        # name its variant: "task.scheduled with trusted=true may only come from ...").
        assert len(reasons) == 1
        assert reasons[0].startswith(f"{etype} ")
        assert " may only come from " in reasons[0]
    else:
        assert all(r.startswith(f"{etype} ") for r in reasons if " may only come from " in r)
    assert result.applied + result.rejected == 1


@pytest.mark.parametrize(("where", "ahead_minutes", "refused"), [
    ("envelope", 60 * 24 * 365 * 7000, True), ("envelope", 20, True), ("envelope", 1, False),
    ("payload", 60 * 24, True), ("payload", 1, False),
])
def test_a_time_from_the_future_is_set_aside(
    log: EventLog, where: str, ahead_minutes: int, refused: bool
) -> None:
    """A turn dated years ahead would stay its session's newest, out of retention's
    reach, forever; a producer's clock a little ahead is still trusted."""
    ahead = to_rfc3339(datetime.now(UTC) + timedelta(minutes=ahead_minutes))
    payload = {"message_id": uuid7(), "role": "user", "content": "hi", "importance": 0.5}
    etype, created = "message.appended", ahead
    if where == "payload":
        etype, created, payload["created_at"] = "message.imported", at(1), ahead
    log.send(orjson.dumps({"id": uuid7(), "type": etype, "v": 1, "session_id": "s1",
                           "created_at": created, "payload": payload}),
             stream=names.INBOX_STREAM if where == "envelope" else names.ADMIN_INBOX_STREAM)
    reasons = log.rejections()
    assert bool(reasons) is refused
    if refused:
        assert "is ahead of this clock by more than 15 minutes" in reasons[0]
