"""The ``sessions`` projection: each session's mark moves with every change to its messages;
its owner is fixed by its first message, never moved; its counts and times.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st

from memq.clock import uuid7
from memq.events import Event, EventType
from memq.store import rebuild, schema
from memq.store.connection import open_connection
from memq.store.read import sessions
from memq.store.read import sessions as session_reads
from memq.store.read.sessions import Owner
from tests.store.eventlog import EventLog, at, event


def appended(session: str, minute: int = 0, content: str = "a turn") -> Event:
    return event(EventType.MESSAGE_APPENDED,
                 {"message_id": uuid7(), "role": "user", "content": content, "importance": 0.5},
                 session=session, created_at=at(minute))


def mark(log: EventLog, session: str) -> int | None:
    return sessions.mark(log.conn, session)


def last_seq(log: EventLog) -> int:
    return int(log.rows("SELECT max(seq) FROM events")[0][0])


def test_a_session_without_messages_has_no_mark(log: EventLog) -> None:
    assert mark(log, "s1") is None


def test_the_mark_is_the_position_of_the_last_append_of_that_session(log: EventLog) -> None:
    log.send(appended("s1"), appended("s2"), appended("s1", 1))  # one fast-path batch
    assert mark(log, "s1") == 3
    assert mark(log, "s2") == 2
    log.send(appended("s2", 2))
    assert mark(log, "s1") == 3
    assert mark(log, "s2") == 4


def test_events_that_do_not_change_messages_leave_the_mark(log: EventLog) -> None:
    first = appended("s1")
    log.send(first)
    before = mark(log, "s1")
    log.send(
        event(EventType.MESSAGE_EMBEDDING_FAILED,
              {"message_id": first.payload["message_id"], "error": "model refused"}),
        event(EventType.MACRO_OBSERVED, {"tool": "ls", "args": {}}, session="s1"),
        event(EventType.FACT_SET, {"category": "c", "key": "k", "value": "v",
                                   "source": "agent"}),
    )
    assert last_seq(log) > 1
    assert mark(log, "s1") == before


def test_a_consolidation_moves_the_mark(log: EventLog) -> None:
    turns = [appended("s1", i) for i in range(3)]
    log.send(*turns)
    log.send(event(EventType.SESSION_CONSOLIDATED, {
        "summary_id": "sum", "content": "a summary", "importance": 0.6, "facts": [],
        "source_ids": [t.payload["message_id"] for t in turns[:2]],
    }, session="s1", created_at=at(10)))
    assert mark(log, "s1") == last_seq(log) == 4


def test_a_rejected_append_leaves_the_mark(log: EventLog) -> None:
    turn = appended("s1")
    log.send(turn)
    clash = appended("s1", 1)
    clash.payload["message_id"] = turn.payload["message_id"]  # the careful path sets it aside
    result = log.send(clash, appended("s2"))
    assert result.rejected == 1
    assert mark(log, "s1") == 1
    assert mark(log, "s2") == last_seq(log)


def test_snapshot_reads_the_mark_and_the_items_together(log: EventLog) -> None:
    log.send(*[appended("s1", i, f"turn {i}") for i in range(5)], appended("s2"))
    snap = sessions.snapshot(log.reader(), "s1", 3)
    assert (snap.log_position, snap.mark) == (6, 5)
    assert [m.content for m in snap.items] == ["turn 2", "turn 3", "turn 4"]
    assert sessions.snapshot(log.reader(), "none", 3) == sessions.SessionSnapshot(6, None, [])


def test_rebuild_gives_the_same_marks(log: EventLog) -> None:
    log.send(appended("s1"), appended("s2"), appended("s1", 1))
    log.send(event(EventType.MACRO_OBSERVED, {"tool": "ls", "args": {}}, session="s2"))
    log.assert_rebuild_equal()


def test_the_migration_fills_the_marks_of_an_older_database(tmp_path: Path) -> None:
    log = EventLog(tmp_path)
    log.send(appended("s1"), appended("s2"), appended("s1", 1))
    log.send(event(EventType.MACRO_OBSERVED, {"tool": "ls", "args": {}}, session="s2"))
    marks = "SELECT session_id, changed_seq FROM sessions ORDER BY 1"
    expected = log.rows(marks)
    log.conn.execute("DROP TABLE sessions; DELETE FROM schema_migrations "
                     "WHERE name = '0010_session_marks'")
    assert schema.migrate(log.conn) == ["0010_session_marks"]
    assert log.rows(marks) == expected == [("s1", 3), ("s2", 2)]
    log.close()


def test_a_legacy_import_gets_marks(tmp_path: Path) -> None:
    path = tmp_path / "legacy.db"
    conn = open_connection(path)
    conn.execute("CREATE TABLE messages (id TEXT PRIMARY KEY, session_id TEXT, role TEXT, "
                 "content TEXT, created_at TEXT)")
    conn.execute("INSERT INTO messages VALUES ('a', 's1', 'user', 'hi', '2024-01-01T00:00:00Z'),"
                 " ('b', 's1', 'user', 'ho', '2024-01-01T00:01:00Z')")
    schema.migrate(conn)
    assert sessions.mark(conn, "s1") == 2
    conn.close()


# -- owners and counts ----------------------------------------------------------------

def append(session: str, text: str = "hello", minute: int = 0, **owner: Any) -> Any:
    payload = {"message_id": uuid7(), "role": "user", "content": text, "importance": 0.5,
               **owner}
    return event(EventType.MESSAGE_APPENDED, payload, session=session, created_at=at(minute))


def owners(log: EventLog) -> dict[str, tuple[Any, ...]]:
    return {r[0]: r[1:] for r in log.rows(
        "SELECT session_id, user_id, agent_id, started_at, last_active_at, message_count "
        "FROM sessions")}


def message_owners(log: EventLog, session: str) -> set[tuple[Any, ...]]:
    return set(log.rows("SELECT user_id, agent_id FROM messages WHERE session_id = ?", session))


def test_first_message_fixes_the_owner_and_later_ones_inherit_it(log: EventLog) -> None:
    result = log.send(append("s1", minute=1, user_id="u1", agent_id="support"),
                      append("s1", minute=3),
                      append("s1", minute=2, user_id="u1"))
    assert result.rejected == 0
    assert owners(log) == {"s1": ("u1", "support", at(1), at(3), 3)}
    assert message_owners(log, "s1") == {("u1", "support")}
    log.assert_rebuild_equal()


@pytest.mark.parametrize(("first", "later", "reason"), [
    ({"user_id": "u1"}, {"user_id": "u2"}, "belongs to user 'u1', not to user 'u2'"),
    ({"user_id": "u1", "agent_id": "a"}, {"agent_id": "b"}, "belongs to agent 'a', not to"),
    ({"user_id": "u1"}, {"agent_id": "b"}, "belongs to no agent, not to agent 'b'"),
    ({}, {"user_id": "u1"}, "belongs to no user, not to user 'u1'"),
])
def test_a_later_message_naming_another_owner_is_refused(
    log: EventLog, first: dict[str, str], later: dict[str, str], reason: str
) -> None:
    log.send(append("s1", "mine", **first))
    result = log.send(append("s1", "theirs", **later), append("s1", "mine too"))
    assert result.rejected == 1
    assert reason in log.rejections()[0]
    assert [r[0] for r in log.rows("SELECT content FROM messages ORDER BY seq")] \
        == ["mine", "mine too"]
    assert message_owners(log, "s1") == {(first.get("user_id"), first.get("agent_id"))}
    log.assert_rebuild_equal()


def test_a_conflict_inside_one_batch_sets_aside_only_that_event(log: EventLog) -> None:
    result = log.send(append("s1", "a", user_id="u1"), append("s2", "b", user_id="u2"),
                      append("s1", "c", user_id="u2"), append("s1", "d"))
    assert (result.applied, result.rejected) == (3, 1)
    assert owners(log)["s1"][:2] == ("u1", None)
    assert owners(log)["s1"][-1] == 2


def test_summaries_take_the_owner_but_are_not_counted(log: EventLog) -> None:
    ids = [uuid7() for _ in range(3)]
    log.send(*[event(EventType.MESSAGE_APPENDED, {"message_id": mid, "role": "user",
                                                  "content": "x" * 50, "importance": 0.5,
                                                  "user_id": "u1"},
                     session="s1", created_at=at(i)) for i, mid in enumerate(ids)])
    summary = event(EventType.SESSION_CONSOLIDATED,
                    {"summary_id": uuid7(), "content": "short", "source_ids": ids,
                     "importance": 0.7}, session="s1", created_at=at(30))
    assert log.send(summary).rejected == 0
    assert owners(log)["s1"] == ("u1", None, at(0), at(2), 3)
    assert message_owners(log, "s1") == {("u1", None)}
    log.assert_rebuild_equal()


def test_listing_is_newest_first_filtered_and_paged(log: EventLog) -> None:
    log.send(append("a", minute=5, user_id="u1", agent_id="x"), append("b", minute=9, user_id="u1"),
             append("c", minute=7, user_id="u2", agent_id="x"), append("d", minute=1))
    conn = log.reader()
    listed = session_reads.list_sessions
    assert [s.session_id for s in listed(conn)] == ["b", "c", "a", "d"]
    assert [s.session_id for s in listed(conn, user_id="u1")] == ["b", "a"]
    assert [s.session_id for s in listed(conn, agent_id="x")] == ["c", "a"]
    assert [s.session_id for s in listed(conn, user_id="u1", agent_id="x")] == ["a"]
    assert [s.session_id for s in listed(conn, limit=2)] == ["b", "c"]
    assert [s.session_id for s in listed(conn, before=at(7))] == ["a", "d"]
    assert session_reads.owner(conn, "c") == Owner("u2", "x")
    assert session_reads.owner(conn, "d") == Owner(None, None)
    assert session_reads.owner(conn, "nobody") is None


@pytest.mark.parametrize("bad", ["", " ", "a\nb", "x" * 201, "tab\there"])
def test_an_owner_that_is_not_an_identifier_is_refused(log: EventLog, bad: str) -> None:
    assert log.send(append("s1", user_id=bad)).rejected == 1
    assert log.send(append("s2", user_id="u", agent_id=bad)).rejected == 1
    assert log.rows("SELECT count(*) FROM sessions") == [(0,)]


owner_ids = st.one_of(st.none(), st.sampled_from(["u1", "u2"]))


@pytest.mark.slow  # a generated run of several seconds: `make test`, not test-fast
@settings(max_examples=40, deadline=None, derandomize=True)
@given(st.lists(st.tuples(st.sampled_from(["s1", "s2"]), owner_ids, owner_ids),
                min_size=1, max_size=8))
@example([("s1", None, None), ("s1", "u1", None)])
@example([("s1", "u1", None), ("s1", None, "u2")])
def test_generated_appends_never_move_a_session(
    tmp_path_factory: pytest.TempPathFactory, appends: list[tuple[str, str | None, str | None]]
) -> None:
    fixed: dict[str, tuple[str | None, str | None]] = {}
    accepted = {"s1": 0, "s2": 0}
    for session, user, agent in appends:
        have = fixed.setdefault(session, (user, agent))
        accepted[session] += user in (None, have[0]) and agent in (None, have[1])
    log = EventLog(tmp_path_factory.mktemp("gen"))
    try:
        for i, (session, user, agent) in enumerate(appends):
            owner = {k: v for k, v in (("user_id", user), ("agent_id", agent)) if v}
            log.send(append(session, f"turn {i}", minute=i, **owner))
        for session, owner in fixed.items():
            assert message_owners(log, session) == {owner}
            assert owners(log)[session][-1] == accepted[session]
        log.assert_rebuild_equal()
    finally:
        log.close()


def test_upgrade_lists_existing_sessions_without_an_owner(tmp_path: Path) -> None:
    path = tmp_path / "old.db"
    conn = open_connection(path)
    schema.migrate(conn, through="0010_session_marks")
    for seq, (text, minute) in enumerate([("old turn", 4), ("older turn", 2)], 1):
        conn.execute(
            "INSERT INTO events (seq, event_id, type, version, session_id, created_at, "
            "recorded_at, payload) VALUES (?, ?, 'message.appended', 1, 's1', ?, ?, '{}')",
            (seq, f"e{seq}", at(minute), at(minute)))
        conn.execute(
            "INSERT INTO messages (id, session_id, role, content, created_at, importance, seq) "
            "VALUES (?, 's1', 'user', ?, ?, 0.5, ?)", (f"m{seq}", text, at(minute), seq))
    conn.execute("INSERT INTO sessions VALUES ('s1', 2)")
    conn.execute("INSERT INTO messages_fts (rowid, content, session) VALUES (1, 'old turn', 'x')")
    schema.migrate(conn)
    rows = conn.execute(
        "SELECT session_id, changed_seq, user_id, agent_id, started_at, last_active_at, "
        "message_count FROM sessions").fetchall()
    assert rows == [("s1", 2, None, None, at(2), at(4), 2)]
    # The lexical index was rebuilt with the new columns, from the messages.
    found = conn.execute("SELECT rowid FROM messages_fts WHERE messages_fts MATCH 'older'")
    assert [r[0] for r in found] == [2]
    conn.close()


def test_rebuild_check_sees_a_session_row_that_drifted(log: EventLog) -> None:
    log.send(append("s1", user_id="u1"))
    log.conn.execute("UPDATE sessions SET user_id = 'u2'")
    assert any("sessions" in line for line in rebuild.check(log.path))
