"""Forgets erased in steps against forgets erased at once: the same batches go to two
databases, one that erases every forget in its own transaction and one that defers every
forget (steps of one message) with steps run between batches. Every read agrees at every
point; once the steps are done, the projections and the log are the same.

Written first by an attack on the change (it found a forgotten turn in an export, a mark
a rebuild did not have, and a result for a hidden message shown as its owner's).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any, TypeVar

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from memq.events import EventType
from memq.store import rebuild
from memq.store.projections import erasure_steps
from memq.store.read import changes as changes_read
from memq.store.read import lexical as lexical_query
from memq.store.read.export import user_events
from memq.store.read.hidden import visible
from memq.store.read.messages import history
from memq.store.read.scope import Scope
from memq.store.read.sessions import list_sessions
from tests.store import test_erasure_interleavings as mixes
from tests.store.eventlog import EventLog, at, event

T = TypeVar("T")

MORE = st.one_of(
    st.tuples(st.just("steps"), st.just(""), st.integers(1, 4)),
    st.tuples(st.just("fact"), st.just("alice"), st.integers(0, 2)),
    st.tuples(st.just("forget_bob"), st.just("bob"), st.just(0)),
    st.tuples(st.just("append_bob"), st.sampled_from(mixes.SESSION_NAMES), st.just(0)),
)
HISTORIES = st.lists(st.one_of(mixes.STEP, MORE, MORE), max_size=30)


@contextmanager
def step_of(messages: int) -> Iterator[None]:
    saved = erasure_steps.STEP, erasure_steps.EVENT_STEP
    erasure_steps.STEP, erasure_steps.EVENT_STEP = messages, 2
    try:
        yield
    finally:
        erasure_steps.STEP, erasure_steps.EVENT_STEP = saved


def at_once(call: Callable[[], T]) -> T:
    with step_of(10**9):
        return call()


def in_steps(call: Callable[[], T]) -> T:
    with step_of(1):
        return call()


def reads(log: EventLog, hidden_ones: bool) -> dict[str, Any]:
    """What every read path answers (the raw messages, filtered as readers filter them)."""
    conn, shown = log.conn, f"AND {visible()}" if hidden_ones else ""
    found: dict[str, Any] = {
        "messages": log.rows(
            "SELECT id, session_id, user_id, agent_id, content, consolidated_at, "
            f"embedding IS NOT NULL FROM messages WHERE 1 {shown} ORDER BY seq"),
        "sessions": list_sessions(conn, limit=1000),
        "facts": log.rows("SELECT user_id, category, key, value FROM facts ORDER BY 1, 2, 3"),
        "changes": changes_read.page(conn, 0, 10_000)[0],
    }
    for session in mixes.SESSION_NAMES:
        found[f"history {session}"] = [m.id for m in history(conn, session, 1000)]
        found[f"words {session}"] = sorted(
            mid for mid, _ in lexical_query.search(conn, Scope(session), "turn", 100))
    for user in ("alice", "bob"):
        found[f"export {user}"] = [(e.id, e.payload)
                                   for e in user_events(conn, user, vectors=True)]
    return found


def _event(log: EventLog, made: list[str], i: int, step: str, target: str, arg: int) -> Any:
    if step == "fact":
        return event(EventType.FACT_SET, {"category": "c", "key": f"k{arg}", "value": f"v{i}",
                                          "source": "agent", "user_id": "alice"})
    if step == "forget_bob":
        return event(EventType.USER_FORGOTTEN, {"user_id": "bob"}, created_at=at(i))
    if step == "append_bob":
        mid, sent = mixes._append(target, f"turn {i} zqturn{i}x {mixes.PADDING}",
                                  {"user_id": "bob"}, i)
        made.append(mid)
        return sent
    return mixes._step(log, made, i, step, target, arg)


@pytest.mark.slow
@settings(max_examples=60, deadline=None, derandomize=True,
          suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture])
@given(HISTORIES)
def test_every_read_agrees_with_forgetting_at_once(
        tmp_path_factory: pytest.TempPathFactory, steps: list[tuple[str, str, int]]) -> None:
    once, stepped = (EventLog(tmp_path_factory.mktemp(n)) for n in ("once", "steps"))
    try:
        made: list[str] = []
        batch: list[Any] = []
        for i, (step, target, arg) in enumerate(steps):
            if step == "steps":
                in_steps(lambda n=arg: stepped.erase_steps(n))
            elif step != "flush":
                sent = _event(once, made, i, step, target, arg)
                batch += [] if sent is None else [sent]
            if batch and (step in ("flush", "steps") or i == len(steps) - 1):
                a = at_once(lambda b=batch: once.send(*b))
                b = in_steps(lambda b=batch: stepped.send(*b))
                assert (a.applied, a.rejected) == (b.applied, b.rejected), steps
                assert once.rejections() == stepped.rejections(), steps
                batch = []
            assert reads(once, False) == reads(stepped, True), steps
        in_steps(stepped.erase_steps)
        assert once.dump() == stepped.dump(), steps
        assert rebuild.check(stepped.path) == [], steps
        log_of = "SELECT seq, erased_by IS NULL, payload FROM events ORDER BY seq"
        assert once.rows(log_of) == stepped.rows(log_of), steps
    finally:
        once.close()
        stepped.close()
