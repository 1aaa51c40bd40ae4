"""Big forgets erased in steps: invisible from their commit, erased a bounded step at a time
between batches, and in the end what erasing them at once gives (store/projections/
erasure_steps.py).

Driven through the writer's own batch code without Redis (tests/store/eventlog.py), with
steps of one message so that every history below interleaves them with other events.
"""

from __future__ import annotations

import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st

from memq.store.projections import erasure_steps
from memq.store.read import lexical as lexical_query
from memq.store.read.messages import history as read_history
from memq.store.read.scope import Scope
from tests.store.eventlog import EventLog
from tests.store.test_forgetting import (
    MARK,
    append,
    call,
    embedded,
    forget_session,
    forget_user,
    payloads_with,
)


@pytest.fixture(autouse=True)
def one_message_a_step(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(erasure_steps, "STEP", 1)
    monkeypatch.setattr(erasure_steps, "EVENT_STEP", 2)



def seen(log: EventLog, session: str) -> list[str]:
    """What a reader finds of a session: its history, and its words in the index."""
    texts = [m.content for m in read_history(log.conn, session, 1000)]
    found = lexical_query.search(log.conn, Scope(session), MARK, 50)
    return texts + [f"indexed {mid}" for mid, _ in found]


def test_a_big_forget_hides_at_once_and_erases_step_by_step(log: EventLog) -> None:
    for i in range(4):
        _, turn = append("s1", f"turn {i} {MARK}", minute=i, user_id="alice")
        log.send(turn)
    log.send(forget_session("s1"))
    assert seen(log, "s1") == []
    assert payloads_with(log, MARK) == 4  # not erased yet: hidden
    assert log.rows("SELECT count(*) FROM erasing") == [(1,)]
    _, later = append("s1", "a new start", minute=9, user_id="bob")
    log.send(later)  # the session again, after the forget: kept, and seen at once
    assert seen(log, "s1") == ["a new start"]
    assert log.erase_steps(2) == 2  # one message each
    assert payloads_with(log, MARK) == 2
    log.erase_steps()
    assert payloads_with(log, MARK) == 0
    assert log.rows("SELECT count(*) FROM erasing") == [(0,)]
    assert log.rows("SELECT messages FROM erasures") == [(4,)]
    assert seen(log, "s1") == ["a new start"]
    log.assert_rebuild_equal()


def test_a_late_result_for_a_hidden_message_is_tombstoned_on_arrival(log: EventLog) -> None:
    ids = [append("s1", f"turn {i}", minute=i, user_id="alice") for i in range(3)]
    log.send(*[e for _, e in ids])
    log.send(forget_user("alice"))
    log.send(embedded(ids[0][0]))
    assert log.rows("SELECT count(*) FROM events WHERE type = 'message.embedded' "
                    "AND erased_by IS NOT NULL") == [(1,)]
    log.erase_steps()
    log.assert_rebuild_equal()


def test_a_second_forget_of_a_session_waits_its_turn(log: EventLog) -> None:
    log.send(*[append("s1", f"first {i}", minute=i, user_id="alice")[1] for i in range(3)])
    log.send(forget_session("s1"))
    log.send(*[append("s1", f"second {i}", minute=9 + i, user_id="bob")[1] for i in range(2)])
    log.send(forget_user("bob"))  # the session is bob's now; its first turns alice's
    assert seen(log, "s1") == []
    assert log.rows("SELECT count(*) FROM erasing") == [(2,)]
    log.erase_steps()
    assert log.rows("SELECT kind, messages FROM erasures ORDER BY seq") == [
        ("session", 3), ("user", 2)]
    log.assert_rebuild_equal()


steps = st.lists(st.one_of(
    st.tuples(st.just("append"), st.sampled_from(["a1", "a2", "b1"]), st.booleans()),
    st.tuples(st.just("forget_session"), st.sampled_from(["a1", "a2", "b1"]), st.just(0)),
    st.tuples(st.just("forget_user"), st.sampled_from(["alice", "bob"]), st.just(0)),
    st.tuples(st.just("call"), st.sampled_from(["a1", "b1"]), st.booleans()),
    st.tuples(st.just("steps"), st.just(""), st.integers(1, 4)),
), min_size=1, max_size=16)

OWNER = {"a1": "alice", "a2": "alice", "b1": "bob"}


@pytest.mark.slow
@settings(max_examples=40, deadline=None, derandomize=True)
@given(steps)
@example([("append", "a1", True), ("append", "a1", True), ("forget_user", "alice", 0),
          ("append", "a1", True), ("forget_session", "a1", 0), ("steps", "", 1)])
@example([("call", "a1", True), ("call", "a1", False), ("forget_session", "a1", 0),
          ("call", "a1", True), ("steps", "", 2)])
def test_generated_histories_with_steps_between_batches_end_as_at_once(
    tmp_path_factory: pytest.TempPathFactory, history: list[tuple[str, str, object]]
) -> None:
    """Whatever runs between the steps, what a forget reached is unseen from its commit,
    gone once its steps are done, and the database is what a rebuild makes."""
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(erasure_steps, "STEP", 1)
        patch.setattr(erasure_steps, "EVENT_STEP", 2)
        log = EventLog(tmp_path_factory.mktemp("steps"))
        try:
            forgotten = _run(log, history)
            log.erase_steps()
            for text in forgotten:
                assert payloads_with(log, text) == 0, (text, history)
            log.assert_rebuild_equal()
        finally:
            log.close()


def _run(log: EventLog, history: list[tuple[str, str, object]]) -> set[str]:
    """Send the history; returns the marked texts forgotten on the way."""
    marked: dict[str, set[str]] = {}
    owned: set[str] = set()
    forgotten: set[str] = set()
    for i, (step, target, flag) in enumerate(history):
        if step == "steps":
            log.erase_steps(int(str(flag)))
            continue
        text = f"m{i}x{MARK}." if flag else f"plain {i}."
        if step in ("append", "call"):
            sent = (append(target, text, minute=i, user_id=OWNER[target])[1]
                    if step == "append" else call(target, "tool", text))
            log.send(sent)
            owned.update([target] if step == "append" else [])
            marked.setdefault(target, set()).add(text)
            continue
        log.send(forget_session(target) if step == "forget_session" else forget_user(target))
        for session in [s for s in marked
                        if s == target or (s in owned and OWNER[s] == target)]:
            owned.discard(session)
            forgotten |= marked.pop(session)
            assert not any(t in forgotten for t in seen(log, session)), history
    return forgotten


def test_the_check_says_an_erasure_is_under_way(log: EventLog) -> None:
    from memq.store import rebuild

    log.send(*[append("s1", f"turn {i}", minute=i, user_id="alice")[1] for i in range(3)])
    log.send(forget_session("s1"))
    assert [d.split(":")[0] for d in rebuild.check(log.path)] == ["erasing"]
    log.erase_steps()
    assert rebuild.check(log.path) == []


def test_status_counts_the_sessions_still_being_erased(log: EventLog) -> None:
    from memq.cli.status import _database_lines
    from memq.store.read import status

    log.send(*[append(s, "turn", user_id="alice")[1] for s in ("s1", "s2", "s2")])
    log.send(forget_user("alice"))
    report = status.database(log.path)
    assert report["erasing"] == 2
    assert "forgets   2 sessions hidden, still being erased in steps" in _database_lines(report)
    log.erase_steps()
    assert status.database(log.path)["erasing"] == 0


# -- found by an attack on the change ----------------------------------------------------

def test_an_export_leaves_out_what_a_forget_hides_in_a_session_used_again(
        log: EventLog) -> None:
    from memq.store.read.export import user_events

    log.send(*[append("s1", f"secret {i} {MARK}", minute=i, user_id="alice")[1]
               for i in range(3)])
    log.send(forget_session("s1"))
    log.send(append("s1", "a new start", minute=9, user_id="alice")[1])
    exported = [e.payload.get("content") for e in user_events(log.conn, "alice", vectors=False)]
    assert exported == ["a new start"]


def test_a_retried_forget_user_finishes_the_first_before_it_says_done(log: EventLog) -> None:
    log.send(*[append("s1", f"secret {i} {MARK}", minute=i, user_id="alice")[1]
               for i in range(3)])
    first = forget_user("alice")
    log.send(first)
    retry = forget_user("alice")
    result = log.send(retry)
    assert [e.event_id for e in result.effects.erased] == [first.id, retry.id]
    assert payloads_with(log, MARK) == 0
    assert log.rows("SELECT kind, messages FROM erasures ORDER BY seq") == [
        ("user", 3), ("user", 0)]
    log.assert_rebuild_equal()


def test_forgetting_a_message_a_forget_hides_finishes_that_forget_first(log: EventLog) -> None:
    from memq.events import EventType
    from tests.store.eventlog import event

    turns = [append("s1", f"secret {i} {MARK}", minute=i, user_id="alice") for i in range(3)]
    log.send(*[e for _, e in turns])
    session = forget_session("s1")
    log.send(session)
    one = event(EventType.MESSAGE_FORGOTTEN, {"message_id": turns[0][0]}, session="s1")
    result = log.send(one)
    assert [e.event_id for e in result.effects.erased] == [session.id, one.id]
    assert payloads_with(log, MARK) == 0
    log.assert_rebuild_equal()


@pytest.mark.parametrize("last", ["retention", "second forget"])
def test_a_drain_in_the_forgets_batch_leaves_no_mark_a_rebuild_has_not(
        log: EventLog, last: str) -> None:
    from memq.events import EventType
    from tests.store.eventlog import at, event

    closing = (event(EventType.RETENTION_APPLIED, {"calls_before": at(0)}, created_at=at(5))
               if last == "retention" else forget_user("bob"))
    log.send(forget_session("a1"), append("a1", "x", user_id="bob")[1],
             append("a1", "y", user_id="bob")[1], forget_user("bob"), closing)
    log.erase_steps()
    log.assert_rebuild_equal()


def test_a_result_for_a_hidden_message_is_nobodys_in_the_feed(log: EventLog) -> None:
    from memq.store.read import changes as changes_read

    turns = [append("a1", f"turn {i}", minute=i, user_id="bob") for i in range(3)]
    log.send(*[e for _, e in turns], embedded(turns[0][0]), forget_session("a1"))
    result = [c for c in changes_read.page(log.conn, 0, 100)[0]
              if c.type == "message.embedded"]
    assert [(c.session_id, c.user_id, c.data) for c in result] == [(None, None, None)]


def test_the_last_steps_follow_up_is_retried_until_it_goes_through(log: EventLog) -> None:
    """A Redis refusal after the last step committed must not lose the forget's outcome
    (what wait_forgotten waits for): the follow-up is tried again, as a batch's is."""
    import threading

    import redis

    log.send(*[append("s1", f"turn {i}", minute=i, user_id="alice")[1] for i in range(3)])
    forget = forget_session("s1")
    log.send(forget)
    published: list[str] = []
    failures = iter([redis.exceptions.ConnectionError("Redis went away")])

    def hook(effects: object) -> None:
        erased = [e.event_id for e in getattr(effects, "erased", [])]
        if erased and next(failures, None) is not None:
            raise redis.exceptions.ConnectionError("Redis went away")
        published.extend(erased)

    log.writer.after_commit.append(hook)
    log.writer._report_failure = lambda exc, delay: None  # type: ignore[method-assign]
    stop = threading.Event()
    while log.writer.erase_step(stop):
        pass
    assert published == [forget.id]
