"""Reads of store/read/messages.py that retrieval leans on: the turn after each match."""

from __future__ import annotations

from typing import Any

import pytest

from memq.clock import uuid7
from memq.events import EventType
from memq.store.read import messages
from memq.store.read.scope import Scope
from tests.store.eventlog import EventLog, at, event


def turn(session: str, minute: int, user: str) -> tuple[str, Any]:
    mid = uuid7()
    return mid, event(EventType.MESSAGE_APPENDED, {
        "message_id": mid, "role": "user", "content": f"turn {minute}", "importance": 0.5,
        "user_id": user}, session=session, created_at=at(minute))


def test_the_next_turn_of_each_is_in_its_own_session_and_scope(log: EventLog) -> None:
    a = [turn("a", m, "u1") for m in (0, 2, 4)]
    b = [turn("b", m, "u1") for m in (1, 3)]
    other = [turn("c", m, "u2") for m in (0, 1)]
    log.send(*(e for _, e in [*a, *b, *other]))
    ids = [a[0][0], a[2][0], b[0][0], other[0][0], "absent"]
    reader = log.reader()
    found = messages.following(reader, Scope("a", "user", "u1"), ids)
    assert {k: v.id for k, v in found.items()} == {a[0][0]: a[1][0], b[0][0]: b[1][0]}
    in_session = messages.following(reader, Scope("a"), ids)
    assert {k: v.id for k, v in in_session.items()} == {a[0][0]: a[1][0]}
    assert messages.following(reader, Scope("a"), []) == {}


@pytest.mark.parametrize("scope", [Scope("a"), Scope("a", "user", "u1"),
                                   Scope("a", "agent", "u1", "x")])
def test_the_next_turns_are_found_by_key_not_by_walking_the_scope(
    log: EventLog, scope: Scope
) -> None:
    sql = messages._FOLLOWING.format(scope=scope.condition("m"))
    plan = [str(row[-1]) for row in log.reader().execute(
        f"EXPLAIN QUERY PLAN {sql}", {**scope.params(), "ids": '["x"]'})]
    assert "SEARCH m USING INDEX sqlite_autoindex_messages_1 (id=?)" in plan, plan


@pytest.mark.parametrize(("scope", "index"), [
    (Scope("a"), "messages_by_importance (session_id=? AND importance>?)"),
    (Scope("a", "user", "u1"), "messages_by_user_importance (user_id=? AND importance>?)"),
    (Scope("a", "agent", "u1", "x"), "messages_by_user_importance (user_id=? AND importance>?)"),
])
def test_rare_important_turns_are_found_by_an_index_at_every_scope(
    log: EventLog, scope: Scope, index: str
) -> None:
    """At user scope the important turns were found by reading every turn of the user."""
    sql = messages._IMPORTANT_BY_INDEX.format(scope=scope.condition())
    plan = [str(row[-1]) for row in log.reader().execute(
        f"EXPLAIN QUERY PLAN {sql}", {**scope.params(), "threshold": 0.8, "limit": 5})]
    assert f"SEARCH messages USING INDEX {index}" in plan, plan
