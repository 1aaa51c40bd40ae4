"""Forgetting in the writer: one event erases a session or a user, and the log agrees.

Driven through the writer's own batch code (tests/store/eventlog.py), without Redis. The
end-to-end test with a real stack, the raw bytes of the files and every Redis key is
tests/producers/test_forget.py.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import orjson
import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st

from memq.clock import uuid7
from memq.events import Event, EventType
from memq.store.dispatch.erasure import truncate_wal
from memq.store.read import lexical as lexical_query
from memq.store.read.facts import list_facts
from memq.store.read.scope import Scope
from memq.store.vectors import to_b64
from tests.store.eventlog import EventLog, at, event

MARK = "zqxmarker"



def append(session: str, text: str, minute: int = 0, **owner: Any) -> tuple[str, Event]:
    mid = uuid7()
    return mid, event(EventType.MESSAGE_APPENDED,
                      {"message_id": mid, "role": "user", "content": text, "importance": 0.5,
                       **owner}, session=session, created_at=at(minute))


def embedded(mid: str) -> Event:
    vector = np.ones(384, dtype=np.float32) / np.sqrt(384)
    return event(EventType.MESSAGE_EMBEDDED, {"message_id": mid, "model": "m", "dim": 384,
                                              "vector_b64": to_b64(vector)})


def forget_session(session: str) -> Event:
    return event(EventType.SESSION_FORGOTTEN, {}, session=session)


def forget_user(user: str) -> Event:
    return event(EventType.USER_FORGOTTEN, {"user_id": user})


def fact(user: str | None, value: str) -> Event:
    payload = {"category": "c", "key": "k", "value": value, "source": "agent"}
    return event(EventType.FACT_SET, payload if user is None else {**payload, "user_id": user})


def record(log: EventLog, session: str, *texts: str, **owner: Any) -> list[str]:
    pairs = [append(session, text, minute=i, **owner) for i, text in enumerate(texts)]
    assert log.send(*[e for _, e in pairs]).rejected == 0
    ids = [mid for mid, _ in pairs]
    assert log.send(*[embedded(mid) for mid in ids]).rejected == 0
    return ids


def payloads_with(log: EventLog, text: str) -> int:
    return len(log.rows("SELECT seq FROM events WHERE instr(payload, ?) > 0", text))


def test_forgetting_a_session_leaves_its_events_as_tombstones(log: EventLog) -> None:
    gone = record(log, "s1", f"my {MARK} secret", "more about it", user_id="u1")
    kept = record(log, "s2", "another session", user_id="u1")
    result = log.send(forget_session("s1"))
    assert result.rejected == 0
    assert log.rows("SELECT id FROM messages") == [(kept[0],)]
    assert payloads_with(log, MARK) == 0
    tombstones = log.rows("SELECT type, payload FROM events WHERE erased_by IS NOT NULL")
    assert sorted(t for t, _ in tombstones) == ["message.appended"] * 2 + [
        "message.embedded"] * 2
    assert {p for _, p in tombstones} == {"{}"}
    # Position, id, type and session stay: the log keeps its order, a redelivery is a no-op.
    assert log.rows("SELECT count(*) FROM events") == [(7,)]
    assert lexical_query.search(log.conn, Scope("s1"), "secret", 5) == []
    assert log.rows("SELECT kind, session_id, user_id, messages, events FROM erasures") == [
        ("session", "s1", "u1", 2, 4)]
    assert sorted(r[0] for r in log.rows("SELECT message_id FROM erased_messages")) \
        == sorted(gone)
    # The session keeps its mark alone: no owner, no times, no count.
    assert log.rows("SELECT user_id, last_active_at, message_count FROM sessions "
                    "WHERE session_id = 's1'") == [(None, None, 0)]
    log.assert_rebuild_equal()


def test_forgetting_a_user_takes_every_session_and_fact_of_theirs(log: EventLog) -> None:
    record(log, "a1", f"alice {MARK} one", user_id="alice", agent_id="x")
    record(log, "a2", f"alice {MARK} two", user_id="alice")
    bob = record(log, "b1", "bob's own", user_id="bob")
    log.send(fact("alice", f"alice {MARK} fact"), fact("bob", "bob's fact"), fact(None, "all"))
    assert log.send(forget_user("alice")).rejected == 0
    assert log.rows("SELECT id FROM messages") == [(bob[0],)]
    assert [(f.user_id, f.value) for f in list_facts(log.conn, user_id="alice")] == [
        (None, "all")]
    assert [f.value for f in list_facts(log.conn, user_id="bob")] == ["all", "bob's fact"]
    assert payloads_with(log, MARK) == 0
    assert log.rows("SELECT session_id FROM sessions ORDER BY 1") == [("b1",)]
    assert log.rows("SELECT kind, user_id, messages FROM erasures") == [("user", "alice", 2)]
    log.assert_rebuild_equal()


def test_summaries_built_from_a_forgotten_session_go_too(log: EventLog) -> None:
    ids = record(log, "s1", *(f"turn {i} about {MARK}" for i in range(4)), user_id="u1")
    summary = event(EventType.SESSION_CONSOLIDATED,
                    {"summary_id": uuid7(), "content": f"{MARK} in short", "source_ids": ids,
                     "importance": 0.7}, session="s1", created_at=at(30))
    assert log.send(summary).rejected == 0
    log.send(forget_session("s1"))
    assert log.rows("SELECT count(*) FROM messages") == [(0,)]
    assert log.rows("SELECT count(*) FROM summary_sources") == [(0,)]
    assert payloads_with(log, MARK) == 0
    log.assert_rebuild_equal()


def test_late_results_for_forgotten_messages_are_tombstoned_on_arrival(log: EventLog) -> None:
    [mid] = record(log, "s1", f"the {MARK}")
    log.send(forget_session("s1"))
    late_summary = event(EventType.SESSION_CONSOLIDATED,
                         {"summary_id": uuid7(), "content": f"{MARK}", "source_ids": [mid],
                          "importance": 0.7}, session="s1")
    failed = event(EventType.MESSAGE_EMBEDDING_FAILED,
                   {"message_id": mid, "model": "m", "error": f"could not embed {MARK}"})
    result = log.send(embedded(mid), late_summary, failed)
    assert (result.applied, result.rejected) == (3, 0)  # accepted, as nothing
    assert log.rows("SELECT count(*) FROM rejected_events") == [(0,)]
    assert payloads_with(log, MARK) == 0
    assert log.rows("SELECT count(*) FROM events WHERE erased_by IS NULL AND payload != '{}' "
                    "AND type != 'session.forgotten'") == [(0,)]
    log.assert_rebuild_equal()


def test_an_unknown_message_is_still_refused(log: EventLog) -> None:
    assert log.send(embedded("never-existed")).rejected == 1


def test_a_forgotten_session_may_start_again_under_another_owner(log: EventLog) -> None:
    record(log, "s1", "first life", user_id="u1")
    log.send(forget_session("s1"))
    record(log, "s1", "second life", user_id="u2")
    assert log.rows("SELECT user_id, message_count FROM sessions") == [("u2", 1)]
    log.send(forget_session("s1"))
    assert log.rows("SELECT count(*) FROM messages") == [(0,)]
    log.assert_rebuild_equal()


def test_appends_and_their_forget_in_one_batch(log: EventLog) -> None:
    _, first = append("s1", f"{MARK} a", user_id="u1")
    _, later = append("s1", "after the forget", minute=5)
    result = log.send(first, forget_session("s1"), later)
    assert result.rejected == 0
    assert [r[0] for r in log.rows("SELECT content FROM messages")] == ["after the forget"]
    assert payloads_with(log, MARK) == 0
    log.assert_rebuild_equal()


def call(session: str, tool: str, path: str) -> Event:
    return event(EventType.MACRO_OBSERVED, {"tool": tool, "args": {"path": path}},
                 session=session)


def test_forgotten_tool_calls_are_unlearned(log: EventLog) -> None:
    log.send(call("s1", "read_file", f"/{MARK}/a"), call("s1", "edit_file", f"/{MARK}/a"))
    macro_id = log.rows("SELECT id FROM macros ORDER BY id")[0][0]
    log.send(event(EventType.MACRO_USED, {"macro_id": macro_id}))
    log.send(call("s2", "ls", "/tmp"), call("s2", "cat", "/tmp/x"))
    log.send(forget_session("s1"))
    assert payloads_with(log, MARK) == 0
    # Only s2's transition is left, and the use of s1's macro went with it.
    assert {r[0] for r in log.rows("SELECT trigger_tool FROM macros")} == {"ls"}
    assert log.rows("SELECT count(*) FROM macro_last_calls WHERE session_id = 's1'") == [(0,)]
    assert log.rows("SELECT count(*) FROM events WHERE type = 'macro.used' "
                    "AND erased_by IS NOT NULL") == [(1,)]
    log.assert_rebuild_equal()


def test_calls_after_a_forget_in_its_batch_are_learned_once(log: EventLog) -> None:
    # The forget learns the macros again from the log, which already holds the calls
    # that follow it in the batch: only those before it count, the rest apply after.
    log.send(call("s1", "read_file", "a"), forget_session("s1"), call("s1", "read_file", "b"),
             call("s1", "edit_file", "b"))
    assert log.rows("SELECT trigger_tool, next_tool FROM macros") == [
        ("read_file", "edit_file")] * 2
    log.assert_rebuild_equal()


def test_rejected_events_that_name_the_forgotten_go(log: EventLog) -> None:
    record(log, "s1", "hello", user_id="u1")
    _, bad = append("s1", f"{MARK} from another user", user_id="u2")
    log.send(bad, event(EventType.FACT_SET, {"category": "c", "key": "k", "value": MARK,
                                            "source": "robot", "user_id": "u1"}))
    assert log.rows("SELECT count(*) FROM rejected_events") == [(2,)]
    log.send(forget_user("u1"))
    reasons = log.rows("SELECT raw FROM rejected_events")
    assert not any(MARK.encode() in bytes(r[0]) for r in reasons)


def test_the_files_hold_no_trace_once_the_wal_is_truncated(log: EventLog) -> None:
    record(log, "s1", f"long {MARK} " * 400, f"short {MARK}", user_id="u1")
    record(log, "s2", "unrelated " * 50)
    log.send(forget_user("u1"))
    assert truncate_wal(log.conn)
    for path in (log.path, f"{log.path}-wal"):
        assert MARK.encode() not in Path(path).read_bytes(), path


def test_a_reader_holding_an_old_snapshot_delays_the_truncation(log: EventLog) -> None:
    record(log, "s1", f"{MARK}")
    reader = log.reader()
    reader.execute("BEGIN")
    reader.execute("SELECT count(*) FROM messages").fetchall()
    log.send(forget_session("s1"))
    log.conn.set_busy_timeout(50)
    assert not truncate_wal(log.conn)
    reader.execute("COMMIT")
    assert truncate_wal(log.conn)
    assert MARK.encode() not in Path(f"{log.path}-wal").read_bytes()


steps = st.lists(st.one_of(
    st.tuples(st.just("append"), st.sampled_from(["a1", "a2", "b1"]), st.booleans()),
    st.tuples(st.just("forget_session"), st.sampled_from(["a1", "a2", "b1"]), st.just(False)),
    st.tuples(st.just("forget_user"), st.sampled_from(["alice", "bob"]), st.just(False)),
    st.tuples(st.just("call"), st.sampled_from(["a1", "b1"]), st.booleans()),
), min_size=1, max_size=12)

OWNER = {"a1": "alice", "a2": "alice", "b1": "bob"}


@pytest.mark.slow  # a generated run of several seconds: `make test`, not test-fast
@settings(max_examples=25, deadline=None, derandomize=True)
@given(steps)
@example([("append", "a1", True), ("call", "a1", True), ("forget_user", "alice", False),
          ("append", "a1", False)])
@example([("call", "a1", True), ("forget_user", "alice", False)])
def test_generated_histories_rebuild_the_same_and_keep_nothing_forgotten(
    tmp_path_factory: pytest.TempPathFactory, history: list[tuple[str, str, bool]]
) -> None:
    log = EventLog(tmp_path_factory.mktemp("forget"))
    try:
        marked: dict[str, set[str]] = {}  # session -> markers since it was last forgotten
        owned: set[str] = set()  # sessions a message gave an owner since then
        for i, (step, target, flag) in enumerate(history):
            text = f"m{i}x{MARK}" if flag else f"plain {i}"
            if step in ("append", "call"):
                if step == "append":
                    log.send(append(target, text, minute=i, user_id=OWNER[target])[1])
                    owned.add(target)
                else:
                    log.send(call(target, "tool", text))
                marked.setdefault(target, set()).add(text)
                continue
            log.send(forget_session(target) if step == "forget_session"
                     else forget_user(target))
            # A session is its user's through its messages: a session with tool calls
            # only belongs to nobody, and only forgetting the session itself reaches it.
            hit = [s for s in marked
                   if s == target or (s in owned and OWNER[s] == target)]
            for session in hit:
                owned.discard(session)
                for gone in marked.pop(session):
                    assert payloads_with(log, gone) == 0, (gone, history)
        log.assert_rebuild_equal()
    finally:
        log.close()


def test_a_forgotten_event_delivered_again_is_a_duplicate_not_a_rejection(
    log: EventLog,
) -> None:
    """A crash between commit and acknowledgement redelivers an entry; if its session was
    forgotten meanwhile, the copy is a no-op: set aside, it would keep the forgotten text."""
    _, original = append("s1", f"secret {MARK}")
    log.send(original)
    log.send(forget_session("s1"))
    result = log.send(original)
    assert (result.applied, result.duplicates, result.rejected) == (0, 1, 0)
    assert log.rejections() == []
    assert MARK not in repr(log.rows("SELECT * FROM rejected_events"))
    # Another event under that id is still refused.
    _, other = append("s2", "other")
    log.send(Event(**{**other.__dict__, "id": original.id}))
    assert "already in the log with different content" in log.rejections()[0]


# -- one message ----------------------------------------------------------------------------


def forget_message(session: str, message_id: str) -> Event:
    return event(EventType.MESSAGE_FORGOTTEN, {"message_id": message_id}, session=session)


def summary_of(session: str, ids: list[str], text: str, minute: int = 30) -> Event:
    return event(EventType.SESSION_CONSOLIDATED,
                 {"summary_id": uuid7(), "content": text, "source_ids": ids,
                  "importance": 0.7}, session=session, created_at=at(minute))


def test_forgetting_one_message_leaves_its_neighbours(log: EventLog) -> None:
    ids = record(log, "s1", "the weather in lisbon", f"my {MARK} secret", "book a flight",
                 user_id="u1")
    other = record(log, "s2", f"another session with {MARK}", user_id="u1")
    assert log.send(forget_message("s1", ids[1])).rejected == 0
    assert log.rows("SELECT id FROM messages WHERE session_id = 's1' ORDER BY seq") == [
        (ids[0],), (ids[2],)]
    assert payloads_with(log, MARK) == 1  # the other session's alone
    assert log.rows("SELECT id FROM messages WHERE session_id = 's2'") == [(other[0],)]
    assert lexical_query.search(log.conn, Scope("s1"), "secret", 5) == []
    assert [i for i, _ in lexical_query.search(log.conn, Scope("s1"), "lisbon", 5)] == [ids[0]]
    assert log.rows("SELECT type FROM events WHERE erased_by IS NOT NULL ORDER BY seq") == [
        ("message.appended",), ("message.embedded",)]
    assert log.rows("SELECT kind, session_id, user_id, messages, events FROM erasures") == [
        ("message", "s1", "u1", 1, 2)]
    assert log.rows("SELECT message_id, session_id, user_id FROM erased_messages") == [
        (ids[1], "s1", "u1")]
    assert log.rows("SELECT message_count, started_at, last_active_at FROM sessions "
                    "WHERE session_id = 's1'") == [(2, at(0), at(2))]
    log.assert_rebuild_equal()


def test_the_counts_follow_the_newest_message_going(log: EventLog) -> None:
    ids = record(log, "s1", "first", "second", "third", user_id="u1")
    [(mark,)] = log.rows("SELECT changed_seq FROM sessions")
    log.send(forget_message("s1", ids[2]))
    [(count, last, moved)] = log.rows(
        "SELECT message_count, last_active_at, changed_seq FROM sessions")
    assert (count, last) == (2, at(1))
    assert moved > mark  # other processes load the session again
    log.assert_rebuild_equal()


def test_a_summary_built_from_the_message_goes_and_frees_its_other_sources(
    log: EventLog,
) -> None:
    ids = record(log, "s1", *(f"turn {i} " + ("secret " + MARK if i == 1 else "plain") * 3
                              for i in range(4)), user_id="u1")
    made = summary_of("s1", ids, f"in short: {MARK}")
    assert log.send(made).rejected == 0
    [(summary_id,)] = log.rows("SELECT id FROM messages WHERE role = 'system'")
    log.send(embedded(summary_id))
    # A pass raced it over two of the same turns: superseded, it changed nothing.
    late = summary_of("s1", [ids[2], ids[3]], "a shorter one", minute=40)
    log.send(late)
    log.send(forget_message("s1", ids[1]))
    assert [r[0] for r in log.rows("SELECT id FROM messages ORDER BY seq")] == [
        ids[0], ids[2], ids[3]]
    assert log.rows("SELECT count(*) FROM messages WHERE consolidated_at IS NOT NULL") == [(0,)]
    assert log.rows("SELECT count(*) FROM summary_sources") == [(0,)]
    assert payloads_with(log, MARK) == 0
    tombstoned = {r[0] for r in log.rows("SELECT event_id FROM events WHERE erased_by > 0")}
    assert {made.id, late.id} <= tombstoned
    assert log.rows("SELECT message_count FROM sessions") == [(3,)]
    log.assert_rebuild_equal()
    # The freed turns may be summarised again.
    assert log.send(summary_of("s1", [ids[0], ids[2]], "again")).rejected == 0
    log.assert_rebuild_equal()


def test_forgetting_a_summary_frees_its_sources(log: EventLog) -> None:
    ids = record(log, "s1", *(f"turn {i} about things" for i in range(3)), user_id="u1")
    log.send(summary_of("s1", ids, f"{MARK}"))
    [(summary_id,)] = log.rows("SELECT id FROM messages WHERE role = 'system'")
    log.send(forget_message("s1", summary_id))
    assert sorted(r[0] for r in log.rows("SELECT id FROM messages")) == sorted(ids)
    assert log.rows("SELECT count(*) FROM messages WHERE consolidated_at IS NOT NULL") == [(0,)]
    assert payloads_with(log, MARK) == 0
    log.assert_rebuild_equal()


def test_a_message_of_another_session_or_an_unknown_id_is_a_recorded_no_op(
    log: EventLog,
) -> None:
    ids = record(log, "s1", "mine", user_id="u1")
    record(log, "s2", "theirs", user_id="u2")
    before = log.dump()["messages"]
    result = log.send(forget_message("s2", ids[0]), forget_message("s1", "no-such-message"))
    assert (result.applied, result.rejected) == (2, 0)
    assert log.dump()["messages"] == before
    assert log.rows("SELECT kind, session_id, messages, events FROM erasures ORDER BY seq") == [
        ("message", "s2", 0, 0), ("message", "s1", 0, 0)]
    assert [e.message_ids for e in result.effects.erased] == [(), ()]
    assert log.rows("SELECT count(*) FROM erased_messages") == [(0,)]
    log.assert_rebuild_equal()


def test_later_turns_keep_the_owner_the_forgotten_one_gave_the_session(log: EventLog) -> None:
    first, e1 = append("s1", "i am alice", 0, user_id="alice", agent_id="x")
    _, e2 = append("s1", "no owner named", 1)
    _, e3 = append("s1", "owner named again", 2, user_id="alice")
    log.send(e1, e2, e3)
    log.send(forget_message("s1", first))
    assert log.rows("SELECT DISTINCT user_id, agent_id FROM messages") == [("alice", "x")]
    log.assert_rebuild_equal()  # a rebuild would refuse e3 if e2 had taken no owner


def test_forgetting_the_only_message_empties_the_session(log: EventLog) -> None:
    [mid] = record(log, "s1", f"{MARK}", user_id="u1")
    log.send(forget_message("s1", mid))
    assert log.rows("SELECT user_id, message_count, last_active_at FROM sessions") == [
        (None, 0, None)]
    record(log, "s1", "a new owner", user_id="u2")
    assert log.rows("SELECT user_id, message_count FROM sessions") == [("u2", 1)]
    log.assert_rebuild_equal()


def test_a_message_appended_and_forgotten_in_one_batch_is_never_embedded(log: EventLog) -> None:
    mid, appended = append("s1", f"{MARK} typed by mistake")
    kept, other = append("s1", "kept", 1)
    result = log.send(appended, other, forget_message("s1", mid))
    assert result.rejected == 0
    assert [m for m, _ in result.effects.embed] == [kept]  # no job would carry the text
    assert payloads_with(log, MARK) == 0
    log.assert_rebuild_equal()


def test_late_results_for_a_forgotten_message_are_tombstoned(log: EventLog) -> None:
    ids = record(log, "s1", f"the {MARK}", "stays")
    log.send(forget_message("s1", ids[0]))
    late = summary_of("s1", ids, f"{MARK}")
    result = log.send(embedded(ids[0]), late)
    assert (result.applied, result.rejected) == (2, 0)
    assert payloads_with(log, MARK) == 0
    assert log.rows("SELECT count(*) FROM messages") == [(1,)]
    log.assert_rebuild_equal()


message_steps = st.lists(st.one_of(
    st.tuples(st.just("append"), st.sampled_from(["a1", "b1"]), st.booleans()),
    st.tuples(st.just("summarise"), st.sampled_from(["a1", "b1"]), st.integers(0, 3)),
    st.tuples(st.just("forget"), st.sampled_from(["a1", "b1"]), st.integers(0, 9)),
    st.tuples(st.just("forget_session"), st.sampled_from(["a1", "b1"]), st.just(0)),
), min_size=1, max_size=14)


@pytest.mark.slow  # a generated run of several seconds: `make test`, not test-fast
@settings(max_examples=40, deadline=None, derandomize=True)
@given(message_steps)
@example([("append", "a1", True)] * 3 + [("summarise", "a1", 0), ("summarise", "a1", 1),
                                          ("forget", "a1", 0)])  # a superseded summary
@example([("append", "a1", True), ("append", "a1", False), ("forget", "a1", 0),
          ("append", "a1", True)])  # the next turns inherit the owner
def test_generated_message_forgets_rebuild_the_same(
    tmp_path_factory: pytest.TempPathFactory, history: list[tuple[str, str, Any]]
) -> None:
    log = EventLog(tmp_path_factory.mktemp("forget-one"))
    try:
        texts: dict[str, str] = {}  # message id -> its marker
        for i, (step, session, arg) in enumerate(history):
            rows = log.rows("SELECT id, role FROM messages WHERE session_id = ? ORDER BY seq",
                            session)
            live, turns = [r[0] for r in rows], [r[0] for r in rows if r[1] != "system"]
            if step == "append":
                owner = {"user_id": "alice"} if arg else {}
                mid, made = append(session, f"turn {i} {MARK}{i}x " * 3, minute=i, **owner)
                log.send(made)
                texts[mid] = f"{MARK}{i}x"
            elif step == "summarise" and turns:  # of turns, as the workers do
                log.send(summary_of(session, turns[arg % len(turns):][:3], f"sum {i}",
                                    minute=i))
            elif step == "forget" and live:
                gone = live[arg % len(live)]
                log.send(forget_message(session, gone))
                if gone in texts:
                    assert payloads_with(log, texts.pop(gone)) == 0, history
            elif step == "forget_session":
                log.send(forget_session(session))
        log.assert_rebuild_equal()
    finally:
        log.close()


def test_an_entry_set_aside_earlier_in_the_same_batch_goes_with_the_forget(
    log: EventLog,
) -> None:
    """The fast path records set-aside entries after applying the batch: a forget after
    one must still see it (the batch takes the careful path, which keeps the order)."""
    [mid] = record(log, "s1", "hello")
    bad = orjson.dumps({"id": uuid7(), "type": "message.embedding_failed", "v": 1,
                        "session_id": None, "created_at": at(1),
                        "payload": {"message_id": mid, "model": "m", "error": MARK,
                                    "unknown_field": 1}})
    result = log.send(bad, forget_message("s1", mid))
    assert (result.applied, result.rejected) == (1, 1)
    assert log.rows("SELECT count(*) FROM rejected_events") == [(0,)]
