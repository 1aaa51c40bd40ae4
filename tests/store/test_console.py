"""The console's own reads: users at a glance, within a grant's tenant, users and agents;
a session's timeline, paged, each turn with its state and cut to size."""

from __future__ import annotations

import numpy as np

from memq.clock import uuid7
from memq.config import DEFAULT_MODEL_NAME
from memq.events import Event, EventType
from memq.store import vectors
from memq.store.read import console
from tests.store.eventlog import EventLog, at, event


def turn(session: str, minute: int, user: str, agent: str | None = None,
         content: str = "a turn") -> Event:
    owner = {"user_id": user} | ({"agent_id": agent} if agent else {})
    return event(EventType.MESSAGE_APPENDED, {"message_id": uuid7(), "role": "user",
                                              "content": content, "importance": 0.5, **owner},
                 session=session, created_at=at(minute))


def test_users_are_listed_by_activity_with_their_counts(log: EventLog) -> None:
    log.send(turn("s1", 1, "alice"), turn("s1", 2, "alice"), turn("s2", 3, "bob"),
             turn("acme\x1fs1", 4, "acme\x1falice"))
    found = console.users(log.reader(), 10)
    assert [(u.user_id, u.sessions, u.turns) for u in found] == [
        ("acme\x1falice", 1, 1), ("bob", 1, 1), ("alice", 1, 2)]
    assert [u.user_id for u in console.users(log.reader(), 1)] == ["acme\x1falice"]


def test_users_within_a_tenant_some_users_and_some_agents(log: EventLog) -> None:
    log.send(turn("a1", 1, "alice", "bot1"), turn("a2", 2, "alice", "bot2"),
             turn("a3", 3, "alice", "bot2"), turn("c1", 4, "carol", "bot2"),
             turn("acme\x1fz", 5, "acme\x1fzed", "acme\x1fbot1"))
    reader = log.reader()
    assert [u.user_id for u in console.users(reader, 10, tenant="default")] == [
        "carol", "alice"]
    assert [u.user_id for u in console.users(reader, 10, tenant="acme")] == ["acme\x1fzed"]
    mine = console.users(reader, 10, tenant="default", agents=["bot1"])
    assert [(u.user_id, u.sessions) for u in mine] == [("alice", 1)]
    assert [u.user_id for u in console.users(reader, 10, among=["carol"])] == ["carol"]


def test_a_timeline_pages_back_with_each_turns_state(log: EventLog) -> None:
    long = "x" * (console.SHOWN_CHARS + 10)
    log.send(*(turn("s1", minute, "alice", content=f"turn {minute}") for minute in range(5)),
             turn("s1", 9, "alice", content=long))
    newest = console.timeline(log.reader(), "s1", 3)
    assert [t.content for t in newest[1:]] == ["turn 4", "turn 3"]
    assert (len(newest[0].content), newest[0].length) == (console.SHOWN_CHARS, len(long))
    assert not any(t.embedded or t.summary_id for t in newest)
    older = console.timeline(log.reader(), "s1", 3, (newest[-1].created_at, newest[-1].seq))
    assert [t.content for t in older] == ["turn 2", "turn 1", "turn 0"]
    assert console.timeline(log.reader(), "nobody", 3) == []


def test_a_turn_with_its_vector_says_so(log: EventLog) -> None:
    first = turn("s1", 1, "alice")
    vector = vectors.to_b64(np.ones(384, dtype=np.float32) / np.sqrt(384))
    log.send(first, turn("s1", 2, "alice"), event(EventType.MESSAGE_EMBEDDED, {
        "message_id": first.payload["message_id"], "model": DEFAULT_MODEL_NAME, "dim": 384,
        "vector_b64": vector}, created_at=at(3)))
    assert [t.embedded for t in console.timeline(log.reader(), "s1", 5)] == [False, True]
