"""The lexical index: kept by the writer in the batch's transaction, safe to query, rebuilt.

Driven through the writer's own batch code (tests/store/eventlog.py), without Redis.
"""

from __future__ import annotations

from pathlib import Path

import apsw
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from memq.clock import uuid7
from memq.events import EventType
from memq.store import lexical, rebuild, schema
from memq.store.connection import open_connection
from memq.store.effects import Effects
from memq.store.projections import apply_event
from memq.store.read import lexical as lexical_query
from memq.store.read.scope import Scope
from memq.store.write.log import append_event
from tests.store.eventlog import EventLog, at, event
from tests.store.test_legacy import make_seed


def appended(content: str, session: str = "s1", message_id: str | None = None,
             minute: int = 0) -> tuple[str, object]:
    mid = message_id or uuid7()
    return mid, event(EventType.MESSAGE_APPENDED,
                      {"message_id": mid, "role": "user", "content": content, "importance": 0.5},
                      session=session, created_at=at(minute))


FILLER = [f"filler turn number {i} about the weekly sync" for i in range(8)]
"""Unrelated turns: BM25 needs a few documents without a word to find it rare."""


def record(log: EventLog, *texts: str, session: str = "s1") -> list[str]:
    pairs = [appended(text, session, minute=i) for i, text in enumerate(texts)]
    result = log.send(*[e for _, e in pairs])  # type: ignore[misc]
    assert result.rejected == 0
    return [mid for mid, _ in pairs]


def search(log: EventLog, query: str, session: str = "s1", limit: int = 10) -> list[str]:
    return [mid for mid, _ in lexical_query.search(log.conn, Scope(session), query, limit)]


def indexed(conn: apsw.Connection) -> int:
    # Rows of the index itself: counting messages_fts would read its content, messages.
    return int(conn.execute("SELECT count(*) FROM messages_fts_docsize").fetchone()[0])


def test_batch_of_appends_is_searchable_and_ranked(log: EventLog) -> None:
    ids = record(log, "We adopted a cat named Miso last spring.",
                 "The weather was grey all week.",
                 "Miso the cat hates the vacuum; the cat hides under the bed.", *FILLER)
    # BM25: the turn with the cat twice comes first, the unrelated ones never.
    assert search(log, "Where does the cat hide?") == [ids[2], ids[0]]
    assert indexed(log.conn) == 3 + len(FILLER)


def test_scores_are_positive_and_best_first(log: EventLog) -> None:
    record(log, "tokyo flight", "tokyo tokyo flight booked for tokyo", *FILLER)
    found = lexical_query.search(log.conn, Scope("s1"), "tokyo flight", 10)
    scores = [score for _, score in found]
    assert len(scores) == 2
    assert scores[0] > scores[1] > 0


def test_stemming_matches_other_forms_of_a_word(log: EventLog) -> None:
    ids = record(log, "She painted a sunrise over the lake.", "He bought groceries.")
    assert search(log, "What does she paint?") == [ids[0]]
    assert search(log, "paintings") == [ids[0]]


def test_search_stays_inside_its_session(log: EventLog) -> None:
    mine = record(log, "the blue paint is in the garage", session="a-b")
    record(log, "the blue paint is in the shed", session="a b")
    record(log, "the blue paint is in the attic", session="a_b")
    record(log, "the blue paint is in the car", session="A-B")
    assert search(log, "blue paint", session="a-b") == mine
    assert search(log, "blue paint", session="nobody") == []


@pytest.mark.parametrize("session", ["x" * 199, "sessão/日本-ed", "s", "ends with ed", "e"])
def test_unusual_session_ids_find_their_own_turns(log: EventLog, session: str) -> None:
    ids = record(log, "a dentist appointment on Friday", session=session)
    record(log, "a dentist appointment on Monday", session=session + "x")
    assert search(log, "dentist", session=session) == ids


SESSIONS = ["Ünïcode id/ed", "x" * 199, "a-b", "two words"]


def stored_tokens(conn: apsw.Connection) -> list[str]:
    conn.execute("CREATE VIRTUAL TABLE temp.v USING fts5vocab(main, messages_fts, 'col')")
    return sorted(r[0] for r in conn.execute("SELECT term FROM temp.v WHERE col = 'session'"))


def test_session_tokens_are_single_and_unstemmed(log: EventLog) -> None:
    for session in SESSIONS:
        record(log, "hello there", session=session)
    assert stored_tokens(log.conn) == sorted(lexical.session_token(s).lower() for s in SESSIONS)


@pytest.mark.parametrize("query", [
    'what did "Melanie" say', "NEAR(paint sunrise)", "paint AND NOT lake", "paint OR",
    "sun* ^paint", "(paint", "paint)", 'a " b', "content: paint", "-paint", "{session}: x",
    "paint + sunrise", "NOT", "AND", "l'été à Paris", "🎨 paint", "paint\x00sunrise",
])
def test_query_syntax_is_never_interpreted(log: EventLog, query: str) -> None:
    ids = record(log, "She painted a sunrise.", "NOT AND OR NEAR are words here too.")
    found = search(log, query)
    assert set(found) <= set(ids)
    if "paint" in query.lower():
        assert ids[0] in found


def test_query_without_words_matches_nothing(log: EventLog) -> None:
    record(log, "anything at all")
    assert lexical_query.match_expression(Scope("s1"), '"" *** ()') is None
    assert search(log, "?!  ...") == []


def test_function_words_are_dropped_unless_nothing_else_is_left(log: EventLog) -> None:
    ids = record(log, "who are you", "the train leaves at noon")
    assert lexical_query.terms("When does the train leave?") == ["train", "leave"]
    assert search(log, "Who are you?") == [ids[0]]


def test_words_left_out_are_not_searched_unless_nothing_else_is_left(log: EventLog) -> None:
    ids = record(log, "Caroline said hello", "the lake at dawn", "Caroline at the lake")
    scope = Scope("s1")

    def found(query: str, leave_out: list[str]) -> set[str]:
        return {mid for mid, _ in lexical_query.search(log.conn, scope, query, 10,
                                                       leave_out=leave_out)}

    assert found("Where is Caroline's lake?", []) == set(ids)
    assert found("Where is Caroline's lake?", ["caroline"]) == {ids[1], ids[2]}
    assert found("Caroline?", ["caroline"]) == {ids[0], ids[2]}  # no other word: kept


def test_contractions_leave_no_fragment_and_take_no_word_with_them(log: EventLog) -> None:
    ids = record(log, "Caroline's painting of the lake", "it's a sunny day, isn't it",
                 "Don moved to New Haven in March")
    assert lexical_query.terms("What's Caroline’s painting? Don't we've it? I'd won't") == [
        "caroline", "painting"]
    assert search(log, "What is Caroline's painting?") == [ids[0]]
    assert lexical_query.terms("Tell me about Don in New Haven, re: March") == [
        "tell", "don", "new", "haven", "re", "march"]
    assert search(log, "Where did Don move?")[0] == ids[2]


def test_a_long_query_is_read_in_one_pass() -> None:
    # Contractions were found by a pattern that tried every position of a long word:
    # 100,000 letters took 43 s of a reader's thread, from any caller with a query.
    assert lexical_query.terms("an" * 1_000_000) == ["an" * 1_000_000]
    assert lexical_query.terms("n't" * 500_000)[:1] == ["n"]


def test_long_query_searches_its_first_words(log: EventLog) -> None:
    ids = record(log, "word1 is here")
    query = " ".join(f"word{i}" for i in range(1, 500))
    assert len(lexical_query.terms(query)) == lexical_query.MAX_TERMS
    assert search(log, query) == ids


def test_rejected_event_leaves_nothing_in_the_index(log: EventLog) -> None:
    first, event_a = appended("the original turn about llamas")
    _, clash = appended("a clashing turn about alpacas", message_id=first)
    _, good = appended("a good turn about alpacas")
    result = log.send(event_a, clash, good)  # type: ignore[arg-type]
    assert result.rejected == 1  # the batch went the careful way, one savepoint per event
    assert len(search(log, "alpacas")) == 1
    assert indexed(log.conn) == 2


def test_index_entries_live_and_die_with_the_writer_transaction(log: EventLog) -> None:
    record(log, "kept turn about kayaks")
    _, lost = appended("lost turn about kayaks", minute=5)
    cur = log.conn.cursor()
    cur.execute("BEGIN IMMEDIATE")
    seq = append_event(cur, lost, at(5))  # type: ignore[arg-type]
    assert seq is not None
    apply_event(cur, lost, seq, Effects())  # type: ignore[arg-type]
    assert len(search(log, "kayaks")) == 2  # indexed before the commit, in the same one
    cur.execute("ROLLBACK")
    assert len(search(log, "kayaks")) == 1
    assert indexed(log.conn) == 1


def test_unindexed_messages_are_no_longer_found(log: EventLog) -> None:
    ids = record(log, "first about otters", "second about otters")
    seq = log.conn.execute("SELECT seq FROM messages WHERE id = ?", (ids[0],)).fetchone()[0]
    lexical.unindex(log.conn.cursor(), [seq])
    assert search(log, "otters") == [ids[1]]
    assert indexed(log.conn) == 1


def test_rebuild_gives_the_same_search_results(log: EventLog) -> None:
    record(log, "a story about a red kite", "red shoes for the wedding", "kites fly in wind")
    record(log, "red wine", session="s2")
    queries = ["red kite", "wedding shoes", "wind", "red"]
    before = {q: lexical_query.search(log.conn, Scope("s1"), q, 10) for q in queries}
    log.assert_rebuild_equal()  # the projections, row by row; rebuilt in place
    after = {q: lexical_query.search(log.conn, Scope("s1"), q, 10) for q in queries}
    assert after == before
    assert indexed(log.conn) == 4


def test_rebuild_repairs_a_damaged_index(log: EventLog) -> None:
    ids = record(log, "the harbour at dawn")
    log.conn.execute("DELETE FROM messages_fts")
    assert search(log, "harbour") == []
    log.close()
    rebuild.rebuild(log.path)
    log.conn = open_connection(log.path)
    assert search(log, "harbour") == ids


def test_migration_indexes_existing_rows_as_the_appliers_would(tmp_path: Path) -> None:
    path = tmp_path / "older.db"
    conn = open_connection(path)
    schema.migrate(conn, through="0006_embedding_backlog_index")
    for seq, session in enumerate(SESSIONS, 1):
        conn.execute("INSERT INTO messages (id, session_id, role, content, created_at, seq)"
                     " VALUES (?, ?, 'user', 'an old turn about herons', ?, ?)",
                     (f"m{seq}", session, at(0), seq))
    assert sorted(schema.migrate(conn)) == [m.name for m in schema.MIGRATIONS if m.name >= "0007"]
    for seq, session in enumerate(SESSIONS, 1):
        found = lexical_query.search(conn, Scope(session), "herons", 5)
        assert [mid for mid, _ in found] == [f"m{seq}"]
    assert stored_tokens(conn) == sorted(lexical.session_token(s).lower() for s in SESSIONS)
    conn.close()


def test_upgraded_legacy_database_is_searchable(tmp_path: Path) -> None:
    path = tmp_path / "legacy.db"
    make_seed(path)
    conn = open_connection(path)
    schema.migrate(conn)
    assert [mid for mid, _ in lexical_query.search(conn, Scope("s1"), "calling tool", 5)] == ["a2"]
    conn.close()


def test_one_message_per_event_is_enforced(log: EventLog) -> None:
    record(log, "a turn")
    seq = log.conn.execute("SELECT seq FROM messages").fetchone()[0]
    with pytest.raises(apsw.ConstraintError):
        log.conn.execute("INSERT INTO messages (id, session_id, role, content, created_at, seq)"
                         " VALUES ('dup', 's1', 'user', 'same seq', ?, ?)", (at(1), seq))


SECRET = "qzvsecretword"


@pytest.mark.parametrize("share", [1.0, 0.0], ids=["in place", "by merging the index"])
def test_unindexing_leaves_none_of_the_words_in_the_file(
        log: EventLog, monkeypatch: pytest.MonkeyPatch, share: float) -> None:
    monkeypatch.setattr(lexical, "IN_PLACE_SHARE", share)
    for batch in range(3):  # several segments, as a long-lived index has
        record(log, *[f"turn {batch}-{i} about the weekly sync" for i in range(40)],
               session=f"other{batch}")
    record(log, f"the {SECRET} is in here", f"and {SECRET} again", session="doomed")
    before = b"".join(r[0] for r in log.rows("SELECT block FROM messages_fts_data") if r[0])
    assert SECRET.encode() in before  # what the test looks for is there to find
    record(log, "the last turn of another conversation", session="other9")
    seqs = [r[0] for r in log.rows("SELECT seq FROM messages WHERE session_id = 'doomed'")]
    cur = log.conn.cursor()
    with log.conn:
        lexical.unindex(cur, seqs)
        cur.execute("DELETE FROM messages WHERE session_id = 'doomed'")
    # The word is the index's only one in q, so it is stored whole (not prefix-compressed);
    # the event log still holds the text: forgetting tombstones it (test_forgetting.py).
    blocks = b"".join(r[0] for r in log.rows("SELECT block FROM messages_fts_data") if r[0])
    assert SECRET.encode() not in blocks
    assert search(log, SECRET, session="doomed") == []
    assert len(search(log, "weekly sync", session="other1")) == 10
    assert lexical.check(cur) is None


def secure_delete(conn: apsw.Connection) -> int:
    rows = conn.execute("SELECT v FROM messages_fts_config WHERE k = 'secure-delete'")
    return int(next(iter(rows), (0,))[0])


@pytest.mark.parametrize("share", [1.0, 0.0], ids=["in place", "by merging the index"])
def test_inserts_are_indexed_without_secure_delete_before_and_after_an_unindex(
        log: EventLog, monkeypatch: pytest.MonkeyPatch, share: float) -> None:
    # 'secure-delete' makes FTS5 seek earlier segments while it indexes a turn that
    # repeats a word (migration 0036): it is on only inside unindex.
    monkeypatch.setattr(lexical, "IN_PLACE_SHARE", share)
    assert secure_delete(log.conn) == 0
    record(log, *[f"turn {i} about the weekly sync" for i in range(40)], session="other")
    record(log, f"the {SECRET} is in here", session="doomed")
    seqs = [r[0] for r in log.rows("SELECT seq FROM messages WHERE session_id = 'doomed'")]
    with log.conn:
        lexical.unindex(log.conn.cursor(), seqs)
    assert secure_delete(log.conn) == 0


def test_an_index_made_with_secure_delete_on_is_upgraded_to_plain_inserts(
        tmp_path: Path) -> None:
    conn = open_connection(str(tmp_path / "old.db"))
    schema.migrate(conn, through="0035_lexical_vocabulary")
    assert secure_delete(conn) == 1  # what migration 0021 left
    schema.migrate(conn)
    assert secure_delete(conn) == 0


def segments(conn: apsw.Connection) -> int:
    return int(conn.execute("SELECT count(DISTINCT segid) FROM messages_fts_idx").fetchone()[0])


def test_tidying_merges_segments_in_bounded_steps_and_changes_no_answer(
        log: EventLog, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(lexical, "TIDY_PAGES", 2)
    for batch in range(3):  # a segment a batch: FTS5 merges a level of four by default
        record(log, *[f"turn {batch}-{i} about the weekly sync " + " ".join(
            f"w{batch}n{i}k{k}" for k in range(60)) for i in range(30)], session=f"s{batch}")
    lexical.open_vocabulary(log.conn)
    content = [log.rows(q) for q in lexical.CONTENT_QUERIES]
    found = search(log, "weekly sync", session="s3")
    many = segments(log.conn)
    assert many == 3
    cur, steps = log.conn.cursor(), 0
    while True:
        with log.conn:
            if not lexical.tidy(cur):
                break
        steps += 1
    assert steps > 1  # bounded: two pages a step could not merge it all at once
    assert segments(log.conn) == 1  # migration 0034: a level of two is merged
    assert [log.rows(q) for q in lexical.CONTENT_QUERIES] == content
    assert search(log, "weekly sync", session="s3") == found
    assert lexical.check(cur) is None
    with log.conn:
        assert not lexical.tidy(cur)  # nothing left: the next look is a no-op


def test_the_index_agrees_with_the_messages_it_reads_back(log: EventLog) -> None:
    # index() makes the scope tokens in Python; the view messages_fts_source in SQL. FTS5
    # deletes a row's words by tokenizing what the view gives, so they must be equal.
    sessions = ["s1", "séance-ü", "会话/7", "Mixed.Case:9", "x" * 200]
    for i, session in enumerate(sessions):
        payload = {"message_id": uuid7(), "role": "user", "content": f"turn {i} ünïcode",
                   "importance": 0.5, "user_id": f"用户-{i}", "agent_id": f"agent é{i}"}
        assert log.send(event(EventType.MESSAGE_APPENDED, payload, session=session)).rejected == 0
    record(log, "a turn without a user or an agent")
    assert lexical.check(log.conn.cursor()) is None
    log.conn.execute("UPDATE messages SET agent_id = 'someone else' WHERE session_id = 's1'"
                     " AND agent_id IS NOT NULL")
    assert lexical.check(log.conn.cursor()) is not None  # the check does see a difference


def test_an_index_of_the_earlier_kind_is_refilled_from_the_messages(tmp_path: Path) -> None:
    conn = open_connection(tmp_path / "memq.db")
    schema.migrate(conn, through="0020_events_erased_by")  # the contentless index
    conn.execute("""INSERT INTO messages (id, session_id, role, content, created_at, seq,
                        user_id) VALUES ('m1', 's1', 'user', 'otters hold hands', ?, 1, 'u1')""",
                 (at(0),))
    conn.execute("INSERT INTO messages_fts (rowid, content, session, user) VALUES (?, ?, ?, ?)",
                 (1, "otters hold hands", lexical.session_token("s1"), lexical.user_token("u1")))
    assert schema.migrate(conn, through="0021_fts_external_content") == [
        "0021_fts_external_content"]
    assert lexical.check(conn.cursor()) is None
    schema.migrate(conn)  # what reads need besides the index (0032: erasing)
    assert [mid for mid, _ in lexical_query.search(conn, Scope("s1"), "otter", 5)] == ["m1"]
    conn.close()


@settings(max_examples=40, deadline=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(st.lists(st.sampled_from(["cat", "miso", "vacuum", "tokyo", "flight", "paint", "lake"]),
                min_size=1, max_size=6), st.integers(1, 12))
def test_the_best_matches_chosen_in_the_index_are_those_of_the_joined_search(
    log: EventLog, words: list[str], limit: int
) -> None:
    """Ranking inside the index before joining the messages (while nothing is being
    erased) gives the same ids, scores and order as joining every match first."""
    if not indexed(log.conn):
        record(log, *FILLER, "the cat Miso", "miso miso soup", "tokyo flight", "cat on a flight",
               "paint the lake", "a vacuum scares the cat", "lake tokyo", "tokyo tokyo")
    expression = lexical_query.match_expression(Scope("s1"), " ".join(words))
    args = (*lexical_query.BM25_WEIGHTS, expression, limit)
    joined = log.conn.execute(lexical_query._SEARCH, args).fetchall()
    assert joined == lexical_query.search(log.conn, Scope("s1"), " ".join(words), limit)
    assert joined == log.conn.execute(lexical_query._SEARCH_ALL_VISIBLE, args).fetchall()


class _ForgetAfterTheCheck:
    """A reader connection that, right after the search's look at ``erasing``, has the
    writer commit a new matching turn and hide every older turn of ``s1`` (the first step
    of a big forget)."""

    def __init__(self, log: EventLog, reader: apsw.Connection) -> None:
        self.log, self.reader = log, reader
        self.new_id = ""

    def __enter__(self) -> apsw.Connection:
        return self.reader.__enter__()

    def __exit__(self, *exc: object) -> bool | None:
        return self.reader.__exit__(*exc)  # type: ignore[arg-type]

    def execute(self, sql: str, *args: object) -> apsw.Cursor:
        cursor = self.reader.execute(sql, *args)
        if sql == lexical_query._ERASING:
            rows = cursor.fetchall()
            [self.new_id] = record(self.log, "cat cat cat", session="s1")
            seq = self.log.conn.execute("SELECT seq FROM messages WHERE id = ?",
                                        (self.new_id,)).fetchall()[0][0]
            self.log.conn.execute("INSERT INTO erasing (session_id, by_seq) VALUES ('s1', ?)",
                                  (seq,))
            return self.reader.execute("SELECT ?", (rows[0][0],))  # what the look saw
        return cursor


def test_a_forget_committed_during_a_search_is_seen_whole_or_not_at_all(
    log: EventLog
) -> None:
    """The look at ``erasing`` and the search read one snapshot: a forget committed in
    between must not let the search skip the visibility check on a snapshot where turns
    are hidden (it returned the hidden turn beside the new one)."""
    [old] = record(log, *FILLER, "the cat Miso")[-1:]
    db = log.conn.execute("PRAGMA database_list").fetchall()[0][2]
    reader = open_connection(db, readonly=True)
    racing = _ForgetAfterTheCheck(log, reader)
    found = [mid for mid, _ in lexical_query.search(racing, Scope("s1"), "cat", 5)]  # type: ignore[arg-type]
    assert found in ([old], [racing.new_id])
    assert search(log, "cat") == [racing.new_id]  # afterwards: the old turn is hidden


# -- words most turns hold -------------------------------------------------------------------


@pytest.fixture
def common_from_share(monkeypatch: pytest.MonkeyPatch) -> float:
    """No floor: in a test's few turns the share alone decides what is common."""
    monkeypatch.setattr(lexical_query, "COMMON_FLOOR", 0)
    monkeypatch.setattr(lexical_query, "COMMON_SHARE", 0.3)
    return 0.3


def test_a_word_most_turns_hold_is_left_out_while_a_rarer_one_remains(
    log: EventLog, common_from_share: float
) -> None:
    ids = record(log, *FILLER, "the lake at dawn", "a weekly swim in the lake")
    weekly = [*ids[:8], ids[9]]
    # Searched with "weekly" too, every filler turn would follow these two.
    assert search(log, "weekly lake") == [ids[8], ids[9]]
    assert sorted(search(log, "weekly")) == sorted(weekly)  # alone, it is searched
    assert sorted(search(log, "weekly sync")) == sorted(weekly)  # every word common: all
    # A word no turn holds is no rarer one: the common word is still searched.
    assert sorted(search(log, "weekly zyzzyva")) == sorted(weekly)


def test_the_default_floor_leaves_a_small_history_searched_by_every_word(log: EventLog) -> None:
    ids = record(log, *FILLER, "the lake at dawn")
    assert len(search(log, "weekly lake")) == 9
    assert search(log, "weekly lake")[0] == ids[8]


def vocabulary_count(conn: apsw.Connection, token: str) -> int:
    found = conn.execute("SELECT doc FROM messages_fts_vocab WHERE term = ?", (token,)).fetchall()
    return int(found[0][0]) if found else 0


def test_the_vocabulary_is_the_index_itself_and_forgets_with_it(log: EventLog) -> None:
    ids = record(log, "first about otters", "second about otters")
    assert vocabulary_count(log.conn, "otter") == 2  # stemmed, as the index keeps it
    seqs = [log.conn.execute("SELECT seq FROM messages WHERE id = ?", (i,)).fetchone()[0]
            for i in ids]
    lexical.unindex(log.conn.cursor(), seqs[:1])
    assert vocabulary_count(log.conn, "otter") == 1
    lexical.unindex(log.conn.cursor(), seqs[1:])
    assert vocabulary_count(log.conn, "otter") == 0
    assert vocabulary_count(log.conn, "first") == 0


def test_a_database_from_before_the_vocabulary_searches_every_word(
    log: EventLog, common_from_share: float
) -> None:
    ids = record(log, *FILLER, "the lake at dawn")
    log.conn.execute("DROP TABLE messages_fts_vocab")
    assert len(search(log, "weekly lake")) == 9
    assert search(log, "weekly lake")[0] == ids[8]


WORDS = ["cat", "miso", "tokyo", "flight", "paint", "lake"]


@settings(max_examples=40, deadline=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(turns=st.lists(st.lists(st.sampled_from(WORDS), min_size=1, max_size=4),
                      min_size=1, max_size=12),
       query=st.lists(st.sampled_from([*WORDS, "zyzzyva"]), min_size=1, max_size=5),
       share=st.floats(0.0, 1.0), most=st.integers(1, 14))
def test_a_search_finds_the_turns_of_its_rare_words_or_else_of_all(
    tmp_path_factory: pytest.TempPathFactory, monkeypatch: pytest.MonkeyPatch,
    turns: list[list[str]], query: list[str], share: float, most: int
) -> None:
    """A model of the rule: the words some turn holds and at most ``share`` of the turns
    do, if any; else those some turn holds, else every word; of those, rarest first, as
    many as hold ``most`` turns in all (the rarest always). The search finds exactly the
    turns holding one."""
    monkeypatch.setattr(lexical_query, "COMMON_FLOOR", 0)
    monkeypatch.setattr(lexical_query, "COMMON_SHARE", share)
    monkeypatch.setattr(lexical_query, "MOST_MATCHES", most)
    log = EventLog(tmp_path_factory.mktemp("rare"))
    try:
        ids = record(log, *[" ".join(words) for words in turns])
        holding = {w: {i for i, words in zip(ids, turns, strict=True) if w in words}
                   for w in dict.fromkeys(query)}
        held = [w for w, found in holding.items() if found]
        rare = [w for w in held if len(holding[w]) <= share * len(turns)]
        chosen, total = [], 0
        for word in sorted(rare or held or list(holding), key=lambda w: len(holding[w])):
            total += len(holding[word])
            if chosen and total > most:
                break
            chosen.append(word)
        expected = set().union(*(holding[w] for w in chosen))
        assert set(search(log, " ".join(query), limit=100)) == expected
    finally:
        log.close()


@settings(max_examples=60, deadline=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(query=st.text(max_size=200), share=st.sampled_from([0.0, 0.3, 1.0]))
def test_any_query_text_is_answered_whatever_its_words_counts(
    log: EventLog, monkeypatch: pytest.MonkeyPatch, query: str, share: float
) -> None:
    """Every word of any text is looked up in the vocabulary (surrogates, diacritics,
    ligatures, FTS5 syntax): an answer, never an error, and only turns that exist."""
    monkeypatch.setattr(lexical_query, "COMMON_FLOOR", 0)
    monkeypatch.setattr(lexical_query, "COMMON_SHARE", share)
    if not indexed(log.conn):
        record(log, *FILLER, "straße ﬁle café", "the lake at dawn", 'quote " and *')
    stored = {mid for (mid,) in log.rows("SELECT id FROM messages")}
    assert set(search(log, query, limit=50)) <= stored


# -- a scope that holds nearly every turn -----------------------------------------------------


def owned(content: str, session: str, user: str, minute: int) -> tuple[str, object]:
    mid = uuid7()
    return mid, event(EventType.MESSAGE_APPENDED, {
        "message_id": mid, "role": "user", "content": content, "importance": 0.5,
        "user_id": user}, session=session, created_at=at(minute))


def fill(log: EventLog, turns: list[tuple[str, str, str]]) -> None:
    """``turns``: (content, session, user), a session always of the same user."""
    pairs = [owned(text, session, user, minute=i) for i, (text, session, user)
             in enumerate(turns)]
    assert log.send(*[e for _, e in pairs]).rejected == 0  # type: ignore[misc]


SCOPES = [Scope("s1", "user", "u1"), Scope("s1"), Scope("s3", "user", "u2")]


@settings(max_examples=60, deadline=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(turns=st.lists(st.tuples(st.lists(st.sampled_from(WORDS), min_size=1, max_size=4),
                                st.sampled_from([("s1", "u1"), ("s2", "u1"), ("s3", "u2")])),
                      min_size=1, max_size=30),
       query=st.lists(st.sampled_from(WORDS), min_size=1, max_size=4),
       limit=st.integers(1, 12), scope=st.sampled_from(SCOPES),
       known=st.sampled_from([1, 10**9]))
def test_a_scope_searched_without_its_token_gives_the_scoped_answer(
    tmp_path_factory: pytest.TempPathFactory, turns: list[tuple[list[str], tuple[str, str]]],
    query: list[str], limit: int, scope: Scope, known: int,
) -> None:
    """Whatever the scope holds of the turns, and whatever the caller believes it holds:
    the same ids, scores and order as the search inside the scope."""
    log = EventLog(tmp_path_factory.mktemp("whole"))
    try:
        fill(log, [(" ".join(words), session, user) for words, (session, user) in turns])
        text = " ".join(query)
        expected = lexical_query.search(log.conn, scope, text, limit)
        assert lexical_query.search(log.conn, scope, text, limit, scope_turns=known) == expected
    finally:
        log.close()


def test_a_scope_of_nearly_every_turn_is_searched_without_its_token(
    log: EventLog, monkeypatch: pytest.MonkeyPatch
) -> None:
    fill(log, [(f"tokyo flight {i}", "s1", "u1") for i in range(19)]
         + [("tokyo tokyo tokyo", "s9", "u9")])
    expected = lexical_query.search(log.conn, SCOPES[0], "tokyo", 5)
    scoped = lexical_query._scoped
    monkeypatch.setattr(lexical_query, "_scoped", None)  # any call to it would fail
    found = lexical_query.search(log.conn, SCOPES[0], "tokyo", 5, scope_turns=19)
    assert found == expected
    assert len(found) == 5
    # With too few of the scope's among the best matches it asked for, it asks the scope.
    monkeypatch.setattr(lexical_query, "_scoped", scoped)
    monkeypatch.setattr(lexical_query, "WHOLE_SHARE", 0.01)
    asked = lexical_query.search(log.conn, Scope("s9", "user", "u9"), "tokyo", 3,
                                 scope_turns=1)
    assert [score for _, score in asked] == [
        score for _, score in lexical_query.search(log.conn, Scope("s9", "user", "u9"),
                                                   "tokyo", 3)]
    assert len(asked) == 1


def test_a_scope_searched_without_its_token_leaves_out_what_a_forget_is_erasing(
    log: EventLog,
) -> None:
    fill(log, [("cat on a flight", "s1", "u1"), ("cat cat", "s2", "u1")])
    log.conn.execute("INSERT INTO erasing (session_id, by_seq) VALUES ('s2', 1000000)")
    found = lexical_query.search(log.conn, SCOPES[0], "cat", 5, scope_turns=2)
    assert found == lexical_query.search(log.conn, SCOPES[0], "cat", 5)
    assert len(found) == 1
