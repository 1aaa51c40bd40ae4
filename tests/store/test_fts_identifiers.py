"""The lexical index's scope tokens: Python (``store.lexical``) and the view
``messages_fts_source`` must make the same for every identifier the events accept, or FTS5
deletes the wrong words and the index silently corrupts.

Driven through the writer's own batch code (tests/store/eventlog.py), without Redis.
"""

from __future__ import annotations

from typing import Any

import apsw
import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from memq.clock import uuid7
from memq.errors import ValidationError
from memq.events import EventType, check_identifier
from memq.store import lexical
from memq.store.read import lexical as lexical_query
from memq.store.read.scope import Scope
from tests.store.eventlog import EventLog, at, event


def _accepted(value: str) -> bool:
    try:
        check_identifier("id", value)
    except ValidationError:
        return False
    return True


# What check_identifier lets through: any code point but C0/C1 controls and surrogates,
# not blank, at most 200 characters. Blank-ish and odd-width values are drawn on purpose.
IDENTIFIERS = st.text(
    st.characters(blacklist_categories=("Cs",)), min_size=1, max_size=200
).filter(_accepted)
CONTENT = st.text(st.characters(blacklist_categories=("Cs",), blacklist_characters="\x00"),
                  max_size=60)
WORDS = st.text("abcdefghijklmnopqrstuvwxyz", min_size=3, max_size=8)


@settings(max_examples=500, deadline=None)
@given(IDENTIFIERS)
@example("1")  # numeric text: TEXT affinity must keep it text for hex()
@example("1e3")
@example("\u00e9")
@example("\U0001f600" * 200)
@example("\ufeff ")
def test_python_and_sql_make_the_same_token(value: str) -> None:
    conn = apsw.Connection(":memory:")
    conn.execute("CREATE TABLE t (v TEXT)")
    conn.execute("INSERT INTO t VALUES (?)", (value,))
    (sql,) = conn.execute("SELECT 's' || hex(v) || 'x' FROM t").fetchone()
    assert sql == lexical.session_token(value)


def _append(session: str, content: str, owner: dict[str, str], minute: int
            ) -> tuple[str, Any]:
    mid = uuid7()
    return mid, event(EventType.MESSAGE_APPENDED,
                      {"message_id": mid, "role": "user", "content": content,
                       "importance": 0.5, **owner}, session=session, created_at=at(minute))


def _forget(session: str, mid: str) -> Any:
    return event(EventType.MESSAGE_FORGOTTEN, {"message_id": mid}, session=session)


SESSIONS = st.lists(
    st.tuples(IDENTIFIERS, st.one_of(st.none(), IDENTIFIERS), st.one_of(st.none(), IDENTIFIERS)),
    min_size=1, max_size=3, unique_by=lambda t: t[0])
TURNS = st.lists(st.tuples(st.integers(0, 2), CONTENT, st.booleans(), st.booleans()),
                 min_size=1, max_size=12)


@pytest.mark.slow  # a generated run of several seconds: `make test`, not test-fast
@pytest.mark.parametrize("share", [1.0, 0.0], ids=["in-place", "bulk"])
@settings(max_examples=40, deadline=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])
@given(sessions=SESSIONS, turns=TURNS, one_batch=st.booleans())
def test_generated_identifiers_and_content_keep_the_index_whole(
    tmp_path_factory: pytest.TempPathFactory, monkeypatch: pytest.MonkeyPatch, share: float,
    sessions: list[tuple[str, str | None, str | None]],
    turns: list[tuple[int, str, bool, bool]], one_batch: bool,
) -> None:
    monkeypatch.setattr(lexical, "IN_PLACE_SHARE", share)
    log = EventLog(tmp_path_factory.mktemp("fts-ids"))
    try:
        marks: dict[str, tuple[str, str]] = {}  # message id -> (session, its marker)
        doomed: list[tuple[str, str]] = []
        sent = []
        for i, (which, content, forget, single) in enumerate(turns):
            session, user, agent = sessions[which % len(sessions)]
            owner = {k: v for k, v in (("user_id", user), ("agent_id", agent)) if v}
            marker = f"zq{i}mark"
            mid, made = _append(session, f"{content} {marker}", owner, i)
            sent.append(made)
            if not one_batch or single:
                log.send(*sent)
                sent = []
            marks[mid] = (session, marker)
            if forget:
                doomed.append((session, mid))
        if sent:
            log.send(*sent)
        # Owners are fixed by the first message of a session: a later one naming another
        # owner is refused, and its marker is not in the index.
        live = {r[0] for r in log.rows("SELECT id FROM messages")}
        assert lexical.check(log.conn.cursor()) is None
        if doomed:
            log.send(*[_forget(s, mid) for s, mid in doomed])
        assert lexical.check(log.conn.cursor()) is None
        gone = {mid for _, mid in doomed}
        for mid, (session, marker) in marks.items():
            found = [m for m, _ in lexical_query.search(log.conn, Scope(session), marker, 5)]
            assert found == ([mid] if mid in live - gone else []), (mid, marker)
        log.assert_rebuild_equal()
        assert lexical.check(log.conn.cursor()) is None
    finally:
        log.close()
