"""Interleavings of appends, summaries, one-message forgets, session and user forgets and
retention, in batches of any size: `memq rebuild --check` finds nothing, the lexical index
passes FTS5's own check, and every message left is found by its words.

Driven through the writer's own batch code (tests/store/eventlog.py), without Redis.
"""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from memq import names
from memq.clock import uuid7
from memq.events import EventType
from memq.store import lexical
from memq.store.read import lexical as lexical_query
from memq.store.read.scope import Scope
from tests.store.eventlog import EventLog, at, event
from tests.store.test_forgetting import embedded
from tests.store.test_fts_identifiers import _append, _forget

SESSION_NAMES = ("a1", "a2", "b1")
STEP = st.one_of(
    st.tuples(st.just("append"), st.sampled_from(SESSION_NAMES), st.integers(0, 2)),
    st.tuples(st.just("summarise"), st.sampled_from(SESSION_NAMES), st.integers(0, 5)),
    # Any id ever made: another session's, a summary's, one already gone, one not yet
    # committed (same batch); or an id nobody made.
    st.tuples(st.just("forget"), st.sampled_from(SESSION_NAMES), st.integers(-1, 30)),
    st.tuples(st.just("forget_session"), st.sampled_from(SESSION_NAMES), st.just(0)),
    st.tuples(st.just("forget_user"), st.just("alice"), st.just(0)),
    st.tuples(st.just("retention"), st.sampled_from(SESSION_NAMES), st.integers(0, 30)),
    st.tuples(st.just("drop_records"), st.just(""), st.integers(0, 30)),
    st.tuples(st.just("embed"), st.just(""), st.integers(0, 30)),
    st.tuples(st.just("flush"), st.just(""), st.just(0)),
    # Recorded tool calls (macros learned from them), a use of a learned macro, and
    # retention of the calls.
    st.tuples(st.just("call"), st.sampled_from(SESSION_NAMES), st.integers(0, 2)),
    st.tuples(st.just("use"), st.just(""), st.integers(0, 5)),
    st.tuples(st.just("expire_calls"), st.just(""), st.integers(0, 30)),
)
STEPS = st.lists(STEP, max_size=25)

TOOLS = ("read_file", "edit_file", "run_tests")


PADDING = "said at some length " * 3
"""A summary must be shorter than its sources."""


def _summary(session: str, ids: list[str], minute: int) -> tuple[str, Any]:
    sid = uuid7()
    return sid, event(EventType.SESSION_CONSOLIDATED,
                      {"summary_id": sid, "content": f"summary {minute} zqsum{minute}x",
                       "source_ids": ids, "importance": 0.7},
                      session=session, created_at=at(minute))


def _step(log: EventLog, made: list[str], i: int, step: str, session: str, arg: int
          ) -> Any:
    if step == "append":
        owner = {1: {"user_id": "alice"}, 2: {"user_id": "alice", "agent_id": "bot"}}
        mid, sent = _append(session, f"turn {i} zqturn{i}x {PADDING}", owner.get(arg, {}), i)
        made.append(mid)
        return sent
    if step == "summarise":
        turns = [r[0] for r in log.rows(
            "SELECT id FROM messages WHERE session_id = ? AND consolidated_at IS NULL "
            "AND id NOT IN (SELECT summary_id FROM summary_sources) ORDER BY seq", session)]
        if not turns:
            return None
        sid, sent = _summary(session, turns[arg % len(turns):][:3], i)
        made.append(sid)
        return sent
    if step == "forget":
        return _forget(session, made[arg % len(made)] if made and arg >= 0 else uuid7())
    if step == "forget_session":
        return event(EventType.SESSION_FORGOTTEN, {}, session=session, created_at=at(i))
    if step == "drop_records":
        return event(EventType.RETENTION_APPLIED, {"forgotten_before": at(arg)},
                     created_at=at(i))
    if step == "embed":
        return embedded(made[arg % len(made)]) if made else None
    if step == "call":
        return event(EventType.MACRO_OBSERVED, {"tool": TOOLS[arg], "args": {"path": f"f{i}"}},
                     session=session, created_at=at(i))
    if step == "use":
        # A committed macro by its id (or an unknown id); odd: as a client of version 1
        # sends it.
        ids = [r[0] for r in log.rows("SELECT id FROM macros ORDER BY ordinal")]
        chosen = ids[arg // 2 % len(ids)] if ids else arg
        return event(EventType.MACRO_USED, {"macro_id": chosen}, created_at=at(i),
                     version=arg % 2)
    if step == "expire_calls":
        return event(EventType.RETENTION_APPLIED, {"calls_before": at(arg)},
                     created_at=at(i))
    if step == "forget_user":
        return event(EventType.USER_FORGOTTEN, {"user_id": session}, created_at=at(i))
    # As the writer's pass: of a session with messages. Known, left open: a session it
    # names without a row gets a mark that a later forget of it, its record dropped, no
    # longer deletes on a rebuild.
    if not log.rows("SELECT 1 FROM messages WHERE session_id = ?", session):
        return None
    return event(EventType.RETENTION_APPLIED,
                 {"messages_before": at(arg), "sessions": [session]}, created_at=at(i))


@pytest.mark.slow  # a generated run of several seconds: `make test`, not test-fast
@settings(max_examples=100, deadline=None)
@given(STEPS, st.sampled_from([1.0, 0.0]))
def test_generated_interleavings_rebuild_the_same_with_a_whole_index(
    tmp_path_factory: pytest.TempPathFactory, steps: list[tuple[str, str, int]], share: float,
) -> None:
    saved = lexical.IN_PLACE_SHARE
    lexical.IN_PLACE_SHARE = share
    log = EventLog(tmp_path_factory.mktemp("fts-mix"))
    try:
        made: list[str] = []
        pending: list[Any] = []
        for i, (step, session, arg) in enumerate(steps):
            if step != "flush":
                sent = _step(log, made, i, step, session, arg)
                pending += [] if sent is None else [sent]
            if (step == "flush" or i == len(steps) - 1) and pending:
                log.send(*pending)
                pending = []
                assert lexical.check(log.conn.cursor()) is None
        for mid, content in log.rows("SELECT id, content FROM messages"):
            word = content.split()[2]
            assert mid in [m for m, _ in lexical_query.search(
                log.conn, Scope(*log.rows("SELECT session_id FROM messages WHERE id = ?",
                                          mid)[0]), word, 50)]
        gone = log.rows("SELECT count(*) FROM messages_fts_docsize")
        assert gone == log.rows("SELECT count(*) FROM messages")
        log.assert_rebuild_equal()
        assert lexical.check(log.conn.cursor()) is None
    finally:
        lexical.IN_PLACE_SHARE = saved
        log.close()


def _retention(session: str, before: int, minute: int) -> Any:
    return event(EventType.RETENTION_APPLIED, {"messages_before": at(before),
                                               "sessions": [session]}, created_at=at(minute))


def test_a_retention_that_erased_nothing_then_a_user_forget_rebuild_the_same(
    tmp_path_factory: pytest.TempPathFactory,
) -> None:
    """Live, the retention moved the mark of a session its user's forget then deleted; a
    rebuild, which no longer sees the session's turns, must not leave it a lone mark."""
    log = EventLog(tmp_path_factory.mktemp("ret-user"))
    try:
        log.send(_append("a1", "turn", {"user_id": "alice"}, 5)[1])
        log.send(_retention("a1", 0, 10))
        log.send(event(EventType.USER_FORGOTTEN, {"user_id": "alice"}, created_at=at(11)))
        log.assert_rebuild_equal()
    finally:
        log.close()


def test_a_retention_that_emptied_a_session_then_a_user_forget_rebuild_the_same(
    tmp_path_factory: pytest.TempPathFactory,
) -> None:
    log = EventLog(tmp_path_factory.mktemp("ret-user2"))
    try:
        log.send(_append("a1", "old", {}, 0)[1])
        log.send(_retention("a1", 1, 1))
        log.send(_append("a1", "new", {"user_id": "alice"}, 2)[1])
        log.send(event(EventType.USER_FORGOTTEN, {"user_id": "alice"}, created_at=at(3)))
        log.assert_rebuild_equal()
    finally:
        log.close()


def test_a_retention_in_the_batch_of_the_turn_it_erases_marks_no_forgotten_session(
    tmp_path_factory: pytest.TempPathFactory,
) -> None:
    """The batch's marks skip the events retention made tombstones, as they skip a
    forget's: else the erased turn marked its session again after its user's forget."""
    log = EventLog(tmp_path_factory.mktemp("ret-batch"))
    try:
        log.send(_append("a1", "old", {}, 0)[1], _retention("a1", 1, 1),
                 _append("a1", "new", {"user_id": "alice"}, 3)[1],
                 event(EventType.USER_FORGOTTEN, {"user_id": "alice"}, created_at=at(4)))
        assert log.rows("SELECT * FROM sessions") == []
        log.assert_rebuild_equal()
    finally:
        log.close()


def test_an_agents_forget_reaches_only_the_session_it_names(
    tmp_path_factory: pytest.TempPathFactory,
) -> None:
    """On the agents' stream: another session's message or summary, named under the
    agent's own session, twice, or in the batch of its append, erases nothing else."""
    log = EventLog(tmp_path_factory.mktemp("agent-forget"))
    agent = names.INBOX_STREAM
    try:
        bob, sent = _append("b1", f"bob's zqbobx {PADDING}", {"user_id": "bob"}, 0)
        log.send(sent, stream=agent)
        summary_id, summary = _summary("b1", [bob], 1)
        assert log.send(summary).rejected == 0, log.rejections()
        mine, sent = _append("a1", "mine zqminex", {"user_id": "alice"}, 2)
        result = log.send(sent, _forget("a1", mine), _forget("a1", mine),
                          _forget("a1", bob), _forget("a1", summary_id), stream=agent)
        assert (result.applied, result.rejected) == (5, 0)
        assert log.rows("SELECT id FROM messages ORDER BY seq") == [(bob,), (summary_id,)]
        assert log.rows("SELECT count(*) FROM erased_messages") == [(1,)]
        assert lexical.check(log.conn.cursor()) is None
        assert [m for m, _ in lexical_query.search(log.conn, Scope("b1"), "zqbobx", 5)] == [bob]
        log.assert_rebuild_equal()
    finally:
        log.close()


def test_a_summary_after_the_forget_of_another_in_one_batch_is_applied_and_kept(
    tmp_path_factory: pytest.TempPathFactory,
) -> None:
    """Forgetting a summary frees its sources: a summary of them later in the same batch
    is new, not one to empty with the forgotten one (its payload must stay)."""
    log = EventLog(tmp_path_factory.mktemp("sum-batch"))
    try:
        turn, sent = _append("a1", f"turn {PADDING}", {}, 0)
        log.send(sent)
        first, summary = _summary("a1", [turn], 1)
        second, again = _summary("a1", [turn], 3)
        assert log.send(summary, _forget("a1", first), again).rejected == 0
        assert log.rows("SELECT summary_id FROM summary_sources") == [(second,)]
        assert log.rows("SELECT count(*) FROM events WHERE erased_by IS NULL "
                        "AND type = 'session.consolidated'") == [(1,)]
        log.assert_rebuild_equal()
    finally:
        log.close()


def _drop_records(before: int, minute: int) -> Any:
    return event(EventType.RETENTION_APPLIED, {"forgotten_before": at(before)},
                 created_at=at(minute))


def test_records_dropped_in_the_batch_of_their_forget_leave_no_mark(
    tmp_path_factory: pytest.TempPathFactory,
) -> None:
    """A forget's time is its producer's: one older than the cutoff may come in the batch
    of the pass that drops its records. Its event leaves the log, so its mark must not
    be made at the end of the batch."""
    log = EventLog(tmp_path_factory.mktemp("drop-batch"))
    try:
        log.send(event(EventType.SESSION_FORGOTTEN, {}, session="a1", created_at=at(0)),
                 _drop_records(1, 1))
        assert log.rows("SELECT * FROM sessions") == []
        log.assert_rebuild_equal()
    finally:
        log.close()


def test_a_rebuild_does_not_drop_the_records_of_a_later_forget(
    tmp_path_factory: pytest.TempPathFactory,
) -> None:
    """A pass drops the records of forgets logged before it; a rebuild in place, which
    still has the rows of later ones (dated by their producers, maybe earlier), must not
    drop theirs: it would delete events from the log."""
    log = EventLog(tmp_path_factory.mktemp("drop-later"))
    try:
        log.send(_drop_records(2, 2))
        log.send(event(EventType.SESSION_FORGOTTEN, {}, session="a1", created_at=at(1)))
        events = log.rows("SELECT seq, type FROM events")
        log.assert_rebuild_equal()
        assert log.rows("SELECT seq, type FROM events") == events
    finally:
        log.close()
