"""The change feed's reads: the log after a position, whose data each change touched, what
a forget left, and the horizon retention moves."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from memq.events import EventType
from memq.store.read import changes
from tests.store.eventlog import EventLog, at, event
from tests.store.test_retention import append, retention


def test_a_page_is_the_log_after_a_position_with_whose_data_each_change_is(
        log: EventLog) -> None:
    log.send(append("s1", "hello", 0, user_id="alice", agent_id="bot"),
             event(EventType.FACT_SET, {"category": "c", "key": "k", "value": "v",
                                        "source": "agent", "user_id": "bob"}),
             event(EventType.FACT_SET, {"category": "c", "key": "g", "value": "v",
                                        "source": "agent"}))
    found, reached = changes.page(log.reader(), 0, 10)
    assert [(c.type, c.session_id, c.user_id, c.agent_id) for c in found] == [
        ("message.appended", "s1", "alice", "bot"), ("fact.set", None, "bob", None),
        ("fact.set", None, None, None)]
    assert [c.position for c in found] == sorted(c.position for c in found)
    assert reached == found[-1].position == changes.newest(log.reader())
    assert found[0].data is not None
    assert found[0].data["content"] == "hello"
    assert changes.page(log.reader(), reached, 10) == ([], reached)
    assert changes.page(log.reader(), found[0].position, 1)[0] == [found[1]]


def test_a_forgotten_change_keeps_its_place_without_its_data(log: EventLog) -> None:
    log.send(append("s1", "a secret", 0, user_id="alice"))
    log.send(event(EventType.SESSION_FORGOTTEN, {}, session="s1", created_at=at(5)))
    found, _ = changes.page(log.reader(), 0, 10)
    assert [(c.type, c.data) for c in found] == [("message.appended", None),
                                                 ("session.forgotten", {})]
    assert "a secret" not in repr(found)


def test_retention_moves_the_horizon_past_what_it_deleted(log: EventLog) -> None:
    log.send(append("a", "old secret", 0, user_id="u1"), append("b", "kept", 1))
    log.send(event(EventType.SESSION_FORGOTTEN, {}, session="a", created_at=at(10)))
    forget = changes.newest(log.reader())
    assert changes.horizon(log.reader()) == 0
    log.send(retention(at(20)))
    assert changes.horizon(log.reader()) == forget  # the forget itself was deleted last
    log.send(retention(at(21)))  # nothing more to delete: the horizon stays
    assert changes.horizon(log.reader()) == forget
    log.assert_rebuild_equal()
    assert changes.horizon(log.reader()) == forget  # beside the log, not a projection


@settings(max_examples=50, deadline=None)
@given(patterns=st.lists(st.sampled_from(["fact.*", "message.appended", "*", "task.?ired",
                                          "nothing"]), max_size=3))
def test_a_type_matches_its_shell_patterns(patterns: list[str]) -> None:
    change = changes.Change(1, "e", "fact.set", at(0), None, None, None, {})
    expected = any(p in ("fact.*", "*") for p in patterns)
    assert changes.matches(change, tuple(patterns)) is expected
    assert changes.matches(change, None) is True


@pytest.mark.parametrize(("change", "acme", "default"), [
    (changes.Change(1, "e", "message.appended", at(0), "acme\x1fs1", "acme\x1falice", "acme\x1fbot",
                    {"user_id": "acme\x1falice"}),
     ("s1", "alice", {"user_id": "alice"}), None),
    (changes.Change(1, "e", "fact.set", at(0), None, "acme\x1f", None,
                    {"user_id": "acme\x1f"}), (None, None, {"user_id": None}), None),
    (changes.Change(1, "e", "fact.set", at(0), None, None, None, {}), None, (None, None, {})),
    (changes.Change(1, "e", "prefix.allowed", at(0), None, None, None,
                    {"prefix": "ls", "tenant": "acme"}),
     (None, None, {"prefix": "ls", "tenant": "acme"}), None),
    (changes.Change(1, "e", "message.embedded", at(0), None, None, None, {}), None, None),
    (changes.Change(1, "e", "message.appended", at(0), "acme\x1fs1", "acme\x1falice", None,
                    {"user_id": "globex\x1falice"}), None, None),
])
def test_a_change_as_each_tenant_sees_it(change: changes.Change, acme: object,
                                         default: object) -> None:
    for tenant, expected in (("acme", acme), ("default", default)):
        seen = changes.in_tenant(tenant, change)
        got = None if seen is None else (seen.session_id, seen.user_id, seen.data)
        assert got == expected, tenant
