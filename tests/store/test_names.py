"""Who a question names, and which sessions of a scope name them too (store/read/names.py).

Driven through the writer's own batch code (tests/store/eventlog.py), without Redis.
"""

from __future__ import annotations

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from memq.store import lexical
from memq.store.read import lexical as lexical_query
from memq.store.read import names
from memq.store.read.scope import Scope
from tests.store.eventlog import EventLog
from tests.store.test_fts import fill


@pytest.mark.parametrize(("query", "expected"), [
    ("What did Caroline research?", ["caroline"]),
    ("When did Melanie's kids visit the Grand Canyon?", ["melanie", "grand", "canyon"]),
    ("Did John and Maria meet? I think so. Maybe Gina knows", ["john", "maria", "gina"]),
    ("Caroline went where?", []),  # a sentence's first word is capitalised by grammar
    ("what did i tell you about The Thing", ["thing"]),  # "i", and a function word
    ("", []),
    ("what did JOHN say", ["john"]),
])
def test_the_names_of_a_question(query: str, expected: list[str]) -> None:
    assert names.names(query) == expected


@given(st.text(max_size=300))
def test_any_text_gives_distinct_folded_words_it_capitalises_past_a_sentence_start(
    text: str,
) -> None:
    found = names.names(text)
    assert len(found) == len(set(found)) <= names.MAX_NAMES
    folded = text.casefold()
    for name in found:
        assert name == name.casefold()
        assert name in folded
        assert name != "i"
        assert name not in lexical_query.STOPWORDS


TURNS = [
    ("Caroline: I went to the support group", "s1", "u1"),
    ("Melanie: that sounds lovely", "s1", "u1"),
    ("Rowan: I went to the support group too", "s2", "u1"),
    ("Avery: tell me more", "s2", "u1"),
    ("Caroline: hello from another user", "s3", "u2"),
]


def ids_of(log: EventLog) -> dict[str, str]:
    return {content: mid for mid, content in log.rows("SELECT id, content FROM messages")}


def test_a_turn_counts_as_naming_when_its_session_does(log: EventLog) -> None:
    fill(log, TURNS)
    mids = ids_of(log)
    asked = [mids[text] for text, _, user in TURNS if user == "u1"]
    scope = Scope("s1", "user", "u1")
    # Melanie's turn does not say "Caroline"; its session does.
    assert names.naming(log.conn, scope, ["caroline"], asked) == {
        mids[TURNS[0][0]], mids[TURNS[1][0]]}
    assert names.naming(log.conn, scope, ["caroline", "avery"], asked) == set(asked)
    assert names.naming(log.conn, scope, ["zyzzyva"], asked) == set()
    assert names.naming(log.conn, scope, [], asked) == set()
    assert names.naming(log.conn, scope, ["caroline"], []) == set()


def test_a_name_said_in_a_session_names_each_of_its_turns_and_no_other_users(
    log: EventLog
) -> None:
    fill(log, [*TURNS, ("Rowan: Caroline said hi", "s2", "u1")])
    mids = ids_of(log)
    mine = [mids["Rowan: I went to the support group too"]]
    assert names.naming(log.conn, Scope("s1", "user", "u1"), ["caroline"], mine) == set(mine)
    theirs = [mids[TURNS[4][0]]]  # "avery" is said in u1's sessions only
    assert names.naming(log.conn, Scope("s3", "user", "u2"), ["avery"], theirs) == set()


def test_a_forgotten_turn_no_longer_names_its_session(log: EventLog) -> None:
    fill(log, TURNS)
    mids = ids_of(log)
    seq = log.rows("SELECT seq FROM messages WHERE id = ?", mids[TURNS[0][0]])[0][0]
    lexical.unindex(log.conn.cursor(), [seq])
    assert names.naming(log.conn, Scope("s1", "user", "u1"), ["caroline"],
                        [mids[TURNS[1][0]]]) == set()


def test_a_name_most_turns_hold_singles_out_no_one(
    log: EventLog, monkeypatch: pytest.MonkeyPatch
) -> None:
    fill(log, TURNS)
    monkeypatch.setattr(lexical_query, "COMMON_FLOOR", 0)
    monkeypatch.setattr(lexical_query, "COMMON_SHARE", 0.3)  # "caroline": 2 of 5 turns
    mids = ids_of(log)
    asked = list(mids.values())
    assert names.naming(log.conn, Scope("s1", "user", "u1"), ["caroline"], asked) == set()
    assert names.naming(log.conn, Scope("s1", "user", "u1"), ["caroline", "melanie"],
                        asked) == {mids[TURNS[0][0]], mids[TURNS[1][0]]}


def test_a_name_said_in_more_turns_than_the_most_looked_up_is_not_looked_for(
    log: EventLog, monkeypatch: pytest.MonkeyPatch
) -> None:
    fill(log, TURNS)
    mids = ids_of(log)
    scope = Scope("s1", "user", "u1")
    monkeypatch.setattr(names, "MOST_TURNS", 1)  # "caroline" is in 2 turns, "melanie" in 1
    assert names.naming(log.conn, scope, ["caroline"], list(mids.values())) == set()
    assert names.naming(log.conn, scope, ["caroline", "melanie"], list(mids.values())) == {
        mids[TURNS[0][0]], mids[TURNS[1][0]]}


WORDS = ["ada", "bo", "cy", "lake", "tea"]
SESSIONS = [("s1", "u1"), ("s2", "u1"), ("s3", "u1"), ("s4", "u2")]


@settings(max_examples=60, deadline=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(turns=st.lists(st.tuples(st.lists(st.sampled_from(WORDS), min_size=1, max_size=3),
                                st.sampled_from(SESSIONS)), min_size=1, max_size=20),
       asked=st.lists(st.sampled_from(WORDS), max_size=3),
       scope=st.sampled_from([Scope("s1", "user", "u1"), Scope("s4", "user", "u2")]))
def test_naming_is_the_turns_whose_session_holds_a_name(
    tmp_path_factory: pytest.TempPathFactory, turns: list[tuple[list[str], tuple[str, str]]],
    asked: list[str], scope: Scope,
) -> None:
    """A model: a candidate of the scope names someone when a turn of its session holds
    one of the asked words (the default floor: no word is common in so few turns)."""
    log = EventLog(tmp_path_factory.mktemp("names"))
    try:
        fill(log, [(" ".join(words), session, user) for words, (session, user) in turns])
        rows = log.rows("SELECT id, session_id, user_id, content FROM messages")
        mine = [(mid, session) for mid, session, user, _ in rows if user == scope.user_id]
        held = {session for _, session, user, text in rows
                if user == scope.user_id and set(text.split()) & set(asked)}
        expected = {mid for mid, session in mine if session in held}
        found = names.naming(log.conn, scope, list(dict.fromkeys(asked)),
                             [mid for mid, _ in mine])
        assert found == expected
    finally:
        log.close()


@settings(max_examples=80, deadline=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(query=st.text(max_size=200))
def test_any_question_text_is_looked_up_without_an_error(log: EventLog, query: str) -> None:
    """Whatever a caller asks (FTS5 syntax, quotes, surrogates, letters casefold changes):
    an answer, and only turns that were asked about."""
    if not log.rows("SELECT 1 FROM messages LIMIT 1"):
        fill(log, [*TURNS, ('Ïsa: "quoted" NEAR(x y) * ^ straße', "s2", "u1")])
    asked = [mid for (mid,) in log.rows("SELECT id FROM messages")]
    scope = Scope("s1", "user", "u1")
    found = names.naming(log.conn, scope, names.names(f"Ask {query}"), asked)
    assert found <= set(asked)
    named = names.named_turns(log.conn, scope, names.names(f"Ask {query}"), 10, most=50)
    mine = {mid for mid, user in log.rows("SELECT id, user_id FROM messages") if user == "u1"}
    assert named is None or set(named.turns) <= mine


def test_the_named_scope_is_the_naming_sessions_turns_newest_first(log: EventLog) -> None:
    fill(log, [*TURNS, ("Avery: Melanie says hi", "s2", "u1")])
    mids = ids_of(log)
    scope = Scope("s9", "user", "u1")
    found = names.named_turns(log.conn, scope, ["caroline", "zyzzyva"], 10, most=50)
    assert found == names.Named(["caroline"], [mids[TURNS[1][0]], mids[TURNS[0][0]]],
                                frozenset({"s1"}))
    # s2 named Melanie last: its turns come first, and the limit cuts s1's.
    found = names.named_turns(log.conn, scope, ["melanie"], 4, most=50)
    assert found is not None
    assert found.turns == [mids["Avery: Melanie says hi"], mids[TURNS[3][0]],
                           mids[TURNS[2][0]], mids[TURNS[1][0]]]
    assert names.named_turns(log.conn, scope, ["zyzzyva"], 10, most=50) is None
    assert names.named_turns(log.conn, scope, ["caroline"], 0, most=50) is None
    assert names.named_turns(log.conn, scope, [], 10, most=50) is None
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(names, "MAX_SESSIONS", 1)
        # A word more sessions say than MAX_SESSIONS is no name that singles anyone out.
        assert names.named_turns(log.conn, scope, ["melanie"], 10, most=50) is None
        assert names.naming(log.conn, scope, ["melanie"], list(mids.values())) == set()
        # Two names of one session each: only the session that named one last is read,
        # and rule 6 is told both.
        found = names.named_turns(log.conn, scope, ["caroline", "rowan"], 10, most=50)
    assert found is not None
    assert found.turns == [mids["Avery: Melanie says hi"], mids[TURNS[3][0]], mids[TURNS[2][0]]]
    assert found.sessions == {"s1", "s2"}
    assert names.in_sessions(log.conn, [], {"s1"}) == set()
    assert names.in_sessions(log.conn, list(mids.values()), set()) == set()
    # Sessions that hold more than `most` turns are most of the scope, not a part of it.
    assert names.named_turns(log.conn, scope, ["caroline"], 10, most=2) is not None
    assert names.named_turns(log.conn, scope, ["caroline"], 10, most=1) is None
    assert names.named_turns(log.conn, scope, ["caroline"], 1, most=1) is not None


@settings(max_examples=80, deadline=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(turns=st.lists(st.tuples(st.lists(st.sampled_from(WORDS), min_size=1, max_size=3),
                                st.sampled_from(SESSIONS)), min_size=1, max_size=20),
       asked=st.lists(st.sampled_from(WORDS), max_size=3),
       scope=st.sampled_from([Scope("s1", "user", "u1"), Scope("s4", "user", "u2")]),
       limit=st.integers(1, 25), most=st.integers(0, 25), cap=st.integers(1, 4))
def test_the_named_scope_is_what_a_model_of_it_gives(
    tmp_path_factory: pytest.TempPathFactory, turns: list[tuple[list[str], tuple[str, str]]],
    asked: list[str], scope: Scope, limit: int, most: int, cap: int,
) -> None:
    """The asked words that at most ``cap`` (MAX_SESSIONS) of the scope's sessions say;
    those sessions, the one that said one last first, and of the first ``cap`` of them
    each session's turns newest first; the first ``limit`` of those; none if they are
    more than ``most`` (and ``limit`` is not). Rule 6 is told every such session."""
    log = EventLog(tmp_path_factory.mktemp("named"))
    try:
        fill(log, [(" ".join(words), session, user) for words, (session, user) in turns])
        rows = log.rows("SELECT id, session_id, user_id, content FROM messages ORDER BY seq")
        mine = [(mid, session, text) for mid, session, user, text in rows
                if user == scope.user_id]
        saying = {word: {session for _, session, text in mine if word in text.split()}
                  for word in asked}
        said = {word for word, sessions in saying.items() if 0 < len(sessions) <= cap}
        last: dict[str, int] = {}
        for at, (_, session, text) in enumerate(mine):
            if set(text.split()) & said:
                last[session] = at
        order = sorted(last, key=lambda session: -last[session])[:cap]
        expected = [mid for session in order
                    for mid, held, _ in reversed(mine) if held == session]
        expected = expected[:limit] if limit <= most or len(expected) <= most else []
        words = list(dict.fromkeys(asked))
        with pytest.MonkeyPatch.context() as patch:
            patch.setattr(names, "MAX_SESSIONS", cap)
            found = names.named_turns(log.conn, scope, words, limit, most)
            candidates = [mid for mid, _, _ in mine]
            naming = names.naming(log.conn, scope, words, candidates)
        assert (found.turns if found else []) == expected
        assert naming == {mid for mid, session, _ in mine if session in last}
        if found:
            assert set(found.words) == said
            assert found.sessions == set(last)
            # Rule 6 asks the sessions found rather than the index again: the same answer.
            assert names.in_sessions(log.conn, candidates, found.sessions) == naming
    finally:
        log.close()
