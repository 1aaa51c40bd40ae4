"""Lexical search over message content: the ``messages_fts`` index, ranked by BM25.

The appliers that insert messages call :func:`index` in the writer's transaction, so the
index and ``messages`` never disagree (migration ``0007_fts`` indexed what was there
before; an applier that ever deletes messages calls :func:`unindex`).

A query is turned into an FTS5 expression the user cannot steer: its words are extracted
with a regular expression, common English function words are dropped (unless nothing
else is left), and each remaining word is quoted, so ``"``, ``*``, ``^``, parentheses,
``NEAR``, ``AND``, ``OR`` and ``NOT`` in a question are just text. The words
are OR-ed, so a turn matching any of them is a candidate, and BM25 ranks turns that
match more, and rarer, words first. The index stems English words (Porter), so "painted"
finds "paint".

BM25's statistics (how rare a word is, how long a turn is) are those of the whole
database, while the match is restricted to one session inside FTS5, by a session token.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from typing import cast

import apsw

from store import bulk

MAX_TERMS = 32
"""A query's first this many distinct words are searched (a long query stays cheap)."""

BM25_WEIGHTS = (1.0, 0.0)
"""Per column of ``messages_fts``: content counts, the session token does not."""

_WORD = re.compile(r"[^\W_]+")
STOPWORDS = frozenset(re.split(
    r"\s+",
    """a about above after again against all am an and any are as at be because been before
    being below between both but by can could did do does doing done down during each either
    else ever few for from further had has have having he her here hers herself him himself
    his how i if in into is it its itself just me more most my myself no nor not now of off
    on once only or other our ours ourselves out over own same she should so some such than
    that the their theirs them themselves then there these they this those through to too
    under until up us very was we were what when where which while who whom whose why will
    with would you your yours yourself yourselves""",
))
"""English function words: they match most turns and say little about any."""

_SEARCH = """
    SELECT m.id, -bm25(messages_fts, ?, ?) AS score
    FROM messages_fts JOIN messages m ON m.seq = messages_fts.rowid
    WHERE messages_fts MATCH ?
    ORDER BY score DESC, m.seq DESC
    LIMIT ?"""


_INDEX = f"""
    INSERT INTO messages_fts (rowid, content, session)
    SELECT {bulk.select_columns(3)} FROM json_each(?1)"""


def index(cur: apsw.Cursor, rows: Iterable[tuple[int, str, str]]) -> None:
    """Index messages given as (seq, session_id, content), in the caller's transaction."""
    try:
        bulk.insert(cur, _INDEX, ((seq, content, session_token(session_id))
                                  for seq, session_id, content in rows))
    except apsw.SQLError as exc:
        # Only while migration 0003 imports a legacy database, before 0007 creates the
        # index (and then indexes every row there is).
        if "no such table: messages_fts" not in str(exc):
            raise


def unindex(cur: apsw.Cursor, seqs: Iterable[int]) -> None:
    """Take messages (by seq) out of the index, for an applier that deletes them."""
    cur.executemany("DELETE FROM messages_fts WHERE rowid = ?", [(seq,) for seq in seqs])


def clear(cur: apsw.Cursor) -> None:
    """Empty the index (a rebuild refills it by replaying the log)."""
    cur.execute("INSERT INTO messages_fts (messages_fts) VALUES ('delete-all')")


def terms(query: str) -> list[str]:
    """The distinct, case-folded words of ``query`` to search, function words dropped."""
    words = list(dict.fromkeys(w.casefold() for w in _WORD.findall(query)))
    content = [w for w in words if w not in STOPWORDS]
    return (content or words)[:MAX_TERMS]


def session_token(session_id: str) -> str:
    """The token the index stores for a session: 's', the hex of its UTF-8, 'x'.

    Hex alone could be split by the tokenizer or stemmed (it may end in "ed"); no Porter
    rule strips an 'x'. Migration 0007 computes the same in SQL.
    """
    return f"s{session_id.encode('utf-8', 'surrogatepass').hex().upper()}x"


def match_expression(session_id: str, query: str) -> str | None:
    """The FTS5 expression for ``query`` within one session; None if it has no words."""
    words = terms(query)
    if not words:
        return None
    # Inside double quotes FTS5 syntax has no meaning; the words hold no quote anyway.
    any_word = " OR ".join(f'"{word}"' for word in words)
    return f'session : "{session_token(session_id)}" AND content : ({any_word})'


def search(
    conn: apsw.Connection, session_id: str, query: str, limit: int
) -> list[tuple[str, float]]:
    """Ids of the session's best ``limit`` lexical matches and their BM25 score, best first.

    Scores are positive and larger for better matches (FTS5's ``bm25()`` is negated); a
    tie goes to the newer turn.
    """
    expression = match_expression(session_id, query)
    if expression is None or limit <= 0:
        return []
    rows = conn.execute(_SEARCH, (*BM25_WEIGHTS, expression, limit)).fetchall()
    # The columns are TEXT and REAL by construction; no per-row conversion needed.
    return cast("list[tuple[str, float]]", rows)
