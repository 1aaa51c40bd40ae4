"""Macros learned per user: each transition of a user's session is counted in the tenant's
aggregate, as before, and in rows of that user; replays and forgets give the same rows."""

from __future__ import annotations

from typing import Any

from memq.clock import uuid7
from memq.events import Event, EventType
from memq.store import schema
from memq.store.projections.macros import content_id
from memq.store.read.macros import candidates
from memq.toolcalls import ANY_ARGS, args_pattern
from tests.store.eventlog import EventLog, at, event

BOBS = {"cmd": "deploy projectzebra now"}
"""A call with distinctive bare words: they stay literal in patterns and templates."""


def call(session: str, tool: str, args: dict[str, Any], minute: int = 0) -> Event:
    return event(EventType.MACRO_OBSERVED, {"tool": tool, "args": args}, session=session,
                 created_at=at(minute))


def turn(session: str, user: str | None, minute: int = 0) -> Event:
    payload = {"message_id": uuid7(), "role": "user", "content": "hello", "importance": 0.5}
    if user is not None:
        payload["user_id"] = user
    return event(EventType.MESSAGE_APPENDED, payload, session=session, created_at=at(minute))


def habit(session: str, first: dict[str, Any], minute: int = 0) -> list[Event]:
    """The same two calls, three times: a macro above the default threshold."""
    return [call(session, tool, args, minute + n)
            for n in range(3) for tool, args in (("terminal", first), ("notify", {}))]


def by_owner(log: EventLog) -> dict[str | None, set[tuple[Any, ...]]]:
    """Every row, as (id, trigger, pattern, next, transitions, triggers), per owner."""
    found: dict[str | None, set[tuple[Any, ...]]] = {}
    for owner, *row in log.rows("SELECT owner, id, trigger_tool, trigger_args_pattern, "
                                "next_tool, transition_count, trigger_count FROM macros"):
        found.setdefault(owner, set()).add(tuple(row))
    return found


def test_a_users_calls_teach_her_rows_and_the_aggregate_as_before(log: EventLog,
                                                                   tmp_path: Any) -> None:
    log.send(turn("alice-1", "alice"), *habit("alice-1", {"cmd": "git status"}))
    rows = by_owner(log)
    assert set(rows) == {None, "alice"}
    # The aggregate is what the same calls taught before: the same ids, the same counts.
    bare = EventLog(tmp_path / "bare")
    try:
        bare.send(*habit("s", {"cmd": "git status"}))
        assert rows[None] == by_owner(bare)[None]
    finally:
        bare.close()
    strip = {(t, p, n, c, k) for _, t, p, n, c, k in rows[None]}
    assert {(t, p, n, c, k) for _, t, p, n, c, k in rows["alice"]} == strip
    assert {i for i, *_ in rows["alice"]} == {
        content_id(t, p, n, "alice") for _, t, p, n, _, _ in rows["alice"]}
    assert not {i for i, *_ in rows["alice"]} & {i for i, *_ in rows[None]}
    assert log.rows("SELECT count(*) FROM macros WHERE owner IS NOT NULL "
                    "AND ordinal IS NOT NULL") == [(0,)]
    log.assert_rebuild_equal()


def test_a_session_without_a_user_teaches_only_the_aggregate(log: EventLog) -> None:
    log.send(turn("anon", None), *habit("anon", BOBS), *habit("no-turns", BOBS, 10))
    assert set(by_owner(log)) == {None}


def test_each_user_reads_only_what_their_own_calls_taught(log: EventLog) -> None:
    log.send(turn("alice-1", "alice"), turn("bob-1", "bob"),
             *habit("alice-1", {"cmd": "git status"}), *habit("bob-1", BOBS, 10))
    with log.reader() as conn:
        pattern = args_pattern(BOBS)
        hers = candidates(conn, "terminal", pattern, {"alice"})
        his = candidates(conn, "terminal", pattern, {"bob"})
        everyone = candidates(conn, "terminal", pattern)
    assert "projectzebra" not in repr(hers)
    assert {m.trigger_args_pattern for m in hers} == {ANY_ARGS}
    assert {m.owner for m in hers} == {"alice"}
    assert {m.trigger_args_pattern for m in his} == {pattern, ANY_ARGS}
    assert {m.owner for m in everyone} == {None}
    assert [m.transition_count for m in everyone if m.trigger_args_pattern == ANY_ARGS] == [6]


def test_forgetting_a_user_takes_their_rows_and_leaves_the_others(log: EventLog,
                                                                   tmp_path: Any) -> None:
    log.send(turn("alice-1", "alice"), turn("bob-1", "bob"),
             *habit("alice-1", {"cmd": "git status"}), *habit("bob-1", BOBS, 10))
    alices = by_owner(log)["alice"]
    log.send(event(EventType.USER_FORGOTTEN, {"user_id": "bob"}))
    log.erase_steps()
    rows = by_owner(log)
    assert set(rows) == {None, "alice"}
    assert rows["alice"] == alices
    assert "projectzebra" not in repr(log.dump()["macros"])
    alone = EventLog(tmp_path / "alone")  # the aggregate: as if bob had recorded nothing
    try:
        alone.send(turn("alice-1", "alice"), *habit("alice-1", {"cmd": "git status"}))
        assert rows == by_owner(alone)
    finally:
        alone.close()
    log.assert_rebuild_equal()


def test_a_forgotten_session_relearns_its_users_rows(log: EventLog) -> None:
    log.send(turn("alice-1", "alice"), turn("alice-2", "alice"),
             *habit("alice-1", {"cmd": "git status"}), *habit("alice-2", BOBS, 10))
    log.send(event(EventType.SESSION_FORGOTTEN, {}, session="alice-2"))
    log.erase_steps()
    assert "projectzebra" not in repr(log.dump()["macros"])
    assert {p for _, _, p, *_ in by_owner(log)["alice"]} == {
        args_pattern({"cmd": "git status"}), ANY_ARGS, args_pattern({})}
    log.assert_rebuild_equal()


def test_the_user_is_the_sessions_at_each_call_for_every_replay(log: EventLog) -> None:
    """Calls before a session's first turn are nobody's, even once it has a user; a turn
    erased after the calls leaves them its user's. A relearning (after another session's
    forget) and a rebuild find the same rows as the writer did."""
    log.send(*habit("late", BOBS), turn("late", "bob", 5), *habit("late", {}, 6))
    log.send(turn("kept", "carol", 20), *habit("kept", {"cmd": "ls"}, 21))
    [(message_id,)] = log.rows("SELECT id FROM messages WHERE session_id = 'kept'")
    log.send(event(EventType.MESSAGE_FORGOTTEN, {"message_id": message_id}, session="kept"))
    live = by_owner(log)
    assert {p for _, _, p, *_ in live["bob"]} == {args_pattern({}), ANY_ARGS}
    assert "carol" in live
    log.send(turn("other", "dan", 40), *habit("other", {}, 41))
    log.send(event(EventType.SESSION_FORGOTTEN, {}, session="other"))
    assert by_owner(log) == live
    log.assert_rebuild_equal()


def test_an_upgrade_learns_the_rows_of_each_user(log: EventLog) -> None:
    log.send(turn("alice-1", "alice"), turn("bob-1", "bob"),
             *habit("alice-1", {"cmd": "git status"}), *habit("bob-1", BOBS, 10))
    log.send(event(EventType.MACRO_USED, {"macro_id": content_id("terminal", ANY_ARGS,
                                                                 "notify")}))
    before = log.dump()
    log.conn.execute("DELETE FROM macros WHERE owner IS NOT NULL")
    log.conn.execute("DELETE FROM schema_migrations WHERE name = '0037_macros_per_user'")
    assert schema.migrate(log.conn) == ["0037_macros_per_user"]
    assert log.dump() == before
    log.assert_rebuild_equal()


def test_forgetting_a_user_takes_their_calls_in_sessions_emptied_before(log: EventLog) -> None:
    """Retention erased every turn of bob's session, which then had no user any more: his
    calls there were still his, and forgetting him takes them and the rows they taught."""
    log.send(turn("bob-1", "bob"), *habit("bob-1", BOBS, 1))
    log.send(event(EventType.RETENTION_APPLIED, {"messages_before": at(30),
                                                 "sessions": ["bob-1"]}, created_at=at(58)))
    assert "bob" in by_owner(log)
    log.send(event(EventType.USER_FORGOTTEN, {"user_id": "bob"}, created_at=at(59)))
    log.erase_steps()
    assert set(by_owner(log)) <= {None}
    assert "projectzebra" not in repr(log.dump()["macros"])
    assert "projectzebra" not in repr(log.rows("SELECT payload FROM events"))
    log.assert_rebuild_equal()
