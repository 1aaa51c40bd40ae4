"""The lexical index: kept by the writer in the batch's transaction, safe to query, rebuilt.

Driven through the writer's own batch code (tests/store/eventlog.py), without Redis.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import apsw
import pytest

from memq.clock import uuid7
from memq.events import EventType
from store import lexical, rebuild, schema
from store.connection import open_connection
from store.effects import Effects
from store.log import append_event
from store.projections import apply_event
from tests.store.eventlog import EventLog, at, event
from tests.store.test_legacy import make_legacy


@pytest.fixture
def log(tmp_path: Path) -> Iterator[EventLog]:
    opened = EventLog(tmp_path)
    yield opened
    opened.close()


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
    return [mid for mid, _ in lexical.search(log.conn, session, query, limit)]


def indexed(conn: apsw.Connection) -> int:
    return int(conn.execute("SELECT count(*) FROM messages_fts").fetchone()[0])


def test_batch_of_appends_is_searchable_and_ranked(log: EventLog) -> None:
    ids = record(log, "We adopted a cat named Miso last spring.",
                 "The weather was grey all week.",
                 "Miso the cat hates the vacuum; the cat hides under the bed.", *FILLER)
    # BM25: the turn with the cat twice comes first, the unrelated ones never.
    assert search(log, "Where does the cat hide?") == [ids[2], ids[0]]
    assert indexed(log.conn) == 3 + len(FILLER)


def test_scores_are_positive_and_best_first(log: EventLog) -> None:
    record(log, "tokyo flight", "tokyo tokyo flight booked for tokyo", *FILLER)
    scores = [score for _, score in lexical.search(log.conn, "s1", "tokyo flight", 10)]
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
    assert lexical.match_expression("s1", '"" *** ()') is None
    assert search(log, "?!  ...") == []


def test_function_words_are_dropped_unless_nothing_else_is_left(log: EventLog) -> None:
    ids = record(log, "who are you", "the train leaves at noon")
    assert lexical.terms("When does the train leave?") == ["train", "leave"]
    assert search(log, "Who are you?") == [ids[0]]


def test_long_query_searches_its_first_words(log: EventLog) -> None:
    ids = record(log, "word1 is here")
    query = " ".join(f"word{i}" for i in range(1, 500))
    assert len(lexical.terms(query)) == lexical.MAX_TERMS
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
    before = {q: lexical.search(log.conn, "s1", q, 10) for q in queries}
    log.assert_rebuild_equal()  # the projections, row by row; rebuilt in place
    after = {q: lexical.search(log.conn, "s1", q, 10) for q in queries}
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
    conn.execute("CREATE TABLE schema_migrations (name TEXT PRIMARY KEY, applied_at TEXT)")
    for migration in schema.MIGRATIONS:
        if migration.name < "0007":
            schema._apply_one(conn, migration)
    for seq, session in enumerate(SESSIONS, 1):
        conn.execute("INSERT INTO messages (id, session_id, role, content, created_at, seq)"
                     " VALUES (?, ?, 'user', 'an old turn about herons', ?, ?)",
                     (f"m{seq}", session, at(0), seq))
    assert schema.migrate(conn) == [m.name for m in schema.MIGRATIONS if m.name >= "0007"]
    for seq, session in enumerate(SESSIONS, 1):
        assert [mid for mid, _ in lexical.search(conn, session, "herons", 5)] == [f"m{seq}"]
    assert stored_tokens(conn) == sorted(lexical.session_token(s).lower() for s in SESSIONS)
    conn.close()


def test_upgraded_legacy_database_is_searchable(tmp_path: Path) -> None:
    path = tmp_path / "legacy.db"
    make_legacy(path)
    conn = open_connection(path)
    schema.migrate(conn)
    assert [mid for mid, _ in lexical.search(conn, "s1", "calling tool", 5)] == ["a2"]
    conn.close()


def test_one_message_per_event_is_enforced(log: EventLog) -> None:
    record(log, "a turn")
    seq = log.conn.execute("SELECT seq FROM messages").fetchone()[0]
    with pytest.raises(apsw.ConstraintError):
        log.conn.execute("INSERT INTO messages (id, session_id, role, content, created_at, seq)"
                         " VALUES ('dup', 's1', 'user', 'same seq', ?, ?)", (at(1), seq))
