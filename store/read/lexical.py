"""Lexical search over message content: the ``messages_fts`` index, ranked by BM25.

A query is turned into an FTS5 expression the user cannot steer: its words are extracted
with a regular expression, common English function words are dropped (unless nothing
else is left), and each remaining word is quoted, so ``"``, ``*``, ``^``, parentheses,
``NEAR``, ``AND``, ``OR`` and ``NOT`` in a question are just text. The words
are OR-ed, so a turn matching any of them is a candidate, and BM25 ranks turns that
match more, and rarer, words first. The index stems English words (Porter), so "painted"
finds "paint".

BM25's statistics (how rare a word is, how long a turn is) are those of the whole
database, while the match is restricted to the scope inside FTS5, by the session, user
and agent tokens each message is indexed with (see :mod:`store.read.scope`). A scope that
holds nearly every indexed turn is searched without its token, and the turns outside it
are dropped after (:data:`WHOLE_SHARE`): the same answer, cheaper.
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable, Collection
from typing import Any, cast

import apsw

from memq.store.read.hidden import visible
from memq.store.read.scope import Scope

MAX_TERMS = 32
"""A query's first this many distinct words are searched (a long query stays cheap)."""

BM25_WEIGHTS = (1.0, 0.0, 0.0, 0.0)
"""Per column of ``messages_fts``: content counts, the session, user and agent tokens do
not."""

WORD = re.compile(r"[^\W_]+")
"""A word: letters and digits, what the index's tokenizer keeps of a text (unicode61)."""
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

_CONTRACTION = re.compile(r"\b\w+n['’]t\b|['’](?:s|d|ll|m|re|ve)\b", re.IGNORECASE)
"""A negated auxiliary, whole ("don't", "isn't": function words), and the ending of any
other contraction ("Caroline's", "we've"), taken out of a query before its words are
read: the tokenizer made "s" of a possessive, in half the turns of a 100,000-turn history,
and BM25 read every one of them for the many questions with one (bench/context.py
--realistic: the lexical search's p95 45 -> 24 ms). A name such as "Don" stays a word."""

_SEARCH = f"""
    SELECT m.id, -bm25(messages_fts, ?, ?, ?, ?) AS score
    FROM messages_fts JOIN messages m ON m.seq = messages_fts.rowid
    WHERE messages_fts MATCH ? AND {visible("m")}
    ORDER BY score DESC, m.seq DESC
    LIMIT ?"""
# While no forget is being erased (nearly always) every match is visible: the best ones are
# chosen inside the index and only they are joined to their messages. Joining every match
# first cost a third of the search at 100,000 turns of one user (bench/context.py
# --realistic: p50 22 -> 15 ms for the best 1,000).
_SEARCH_ALL_VISIBLE = """
    SELECT m.id, best.score FROM (
        SELECT rowid, -bm25(messages_fts, ?, ?, ?, ?) AS score FROM messages_fts
        WHERE messages_fts MATCH ? ORDER BY score DESC, rowid DESC LIMIT ?) AS best
    JOIN messages m ON m.seq = best.rowid
    ORDER BY best.score DESC, m.seq DESC"""
_ERASING = "SELECT EXISTS (SELECT 1 FROM erasing)"
_SEARCH_WHOLE = """
    SELECT m.id, best.score, ({inside}) FROM (
        SELECT rowid, -bm25(messages_fts, :w0, :w1, :w2, :w3) AS score FROM messages_fts
        WHERE messages_fts MATCH :match ORDER BY score DESC, rowid DESC LIMIT :limit) AS best
    JOIN messages m ON m.seq = best.rowid
    ORDER BY best.score DESC, m.seq DESC"""

WHOLE_SHARE = 0.9
"""A scope known to hold at least this share of the indexed turns is searched without its
token in the match, asking for ``1.1 / share`` times the matches wanted and keeping the
scope's. The token's phrase is costly when it is in most turns: BM25 counts the turns of
every phrase of a query, the scope's as well, though its weight is 0. At 100,119 turns of
one user (bench/context.py --realistic) the best 1,000 took 6.7 -> 3.9 ms at p50 and
10.4 -> 7.2 at p95, the same ids and scores for all 200 questions. The scores are the
same either way: BM25's statistics are the whole index's, and the scope's column has no
weight. If the matches asked for hold too few of the scope's, the scope is searched as
usual."""

TOKENIZER = ("porter", ["unicode61", "remove_diacritics", "2"])
"""The index's own tokenizer (migration 0021_fts_external_content), to find a word's
tokens as it stored them."""

COMMON_SHARE = 0.02
"""A query's word found in more than this share of the indexed turns is not searched while
a rarer one is (BM25 gives it a weight of at most ln(1 + 1/share), 3.9, against 6-9 for a
rare word). Such a word's matches were much of a search's work: at 100,119 turns of one
user, OR-ing them in took the search for the best 1,000 from 13.9 to 18.3 ms at p50 and
from 22.3 to 31.2 at p95 (bench/context.py --realistic, its `BM25 best 1,000` line; this
share set to 1 for the second). The counts are the whole database's,
as BM25's own statistics are (docs/security.md, Out of scope)."""

COMMON_FLOOR = 1000
"""A word in fewer turns than this is never left out: its matches are cheap to score, and in
a small history the share above would leave out words that single out a few turns."""

MOST_MATCHES = 40_000
"""The turns a query's words may hold in all: past it, its commoner words are left out, the
rarest searched first (and always). FTS5 scores every match to rank them, so this bounds
a search however long the history. It binds only in very long ones: at 100,119 turns of
bench/context.py --realistic's history it changed none of 200 answers; at 1,000,158 (calls
alternated in one process) get_context's p50 / p95 went from 57.1 / 101.9 to 54.1 / 82.7
ms with recall 0.713 against 0.715; a tighter bound cost recall there (20,000: 0.700
against 0.718, 10,000: 0.688), the words of a question being said in every copy of its
conversation."""

_DOCUMENTS = "SELECT doc FROM messages_fts_vocab WHERE term = ?"
# An upper bound of the indexed turns, read in one index step (a count reads them all):
# forgotten turns only make it larger, and a word then looks rarer, never commoner.
_INDEXED = "SELECT max(seq) FROM messages"
# Fewer than _INDEXED (seq counts every event, a turn's embedding too) and still an upper
# bound: rowids are distinct positive integers, and a turn's is never renumbered upwards.
_TURNS = "SELECT max(rowid) FROM messages"


def terms(query: str) -> list[str]:
    """The distinct, case-folded words of ``query`` to search, function words dropped."""
    words = list(dict.fromkeys(
        w.casefold() for w in WORD.findall(without_contractions(query))))
    content = [w for w in words if w not in STOPWORDS]
    return (content or words)[:MAX_TERMS]


def without_contractions(text: str) -> str:
    """``text`` with what :data:`_CONTRACTION` matches blanked out."""
    return _CONTRACTION.sub(" ", text)


def rare_terms(conn: apsw.Connection, words: list[str]) -> list[str]:
    """``words`` without those in more than :data:`COMMON_SHARE` of the indexed turns
    (and :data:`COMMON_FLOOR`) or in none, unless that leaves none (then all of them);
    of those, rarest first, as many as hold :data:`MOST_MATCHES` turns in all."""
    if len(words) < 2:
        return words
    counts = _counts(conn, words)
    if counts is None:
        return words
    held = [w for w in words if counts[w] > 0]
    limit = _common_limit(conn)
    chosen = [w for w in held if counts[w] <= limit] or held or words
    return _within(chosen, counts, MOST_MATCHES)


def uncommon(conn: apsw.Connection, words: list[str], *, missing: list[str],
             most: float = math.inf) -> list[str]:
    """Those of ``words`` that some indexed turns hold, but not more than
    :data:`COMMON_SHARE` of them (and :data:`COMMON_FLOOR`), nor more than ``most``;
    ``missing`` on a database from before the index's vocabulary (migration 0035), which
    cannot tell."""
    counts = _counts(conn, words)
    if counts is None:
        return missing
    limit = min(_common_limit(conn), most)
    return [w for w in words if 0 < counts[w] <= limit]


def _counts(conn: apsw.Connection, words: list[str]) -> dict[str, int] | None:
    """How many turns hold each word; None before the index's vocabulary."""
    tokenize = conn.fts5_tokenizer(*TOKENIZER)
    try:
        return {w: _documents(conn, tokenize, w) for w in words}
    except apsw.SQLError as exc:
        if "no such table" in str(exc):
            return None
        raise


def _common_limit(conn: apsw.Connection) -> float:
    indexed = cast("int | None", conn.execute(_INDEXED).fetchall()[0][0])
    return max(COMMON_SHARE * (indexed or 0), COMMON_FLOOR)


def _within(words: list[str], counts: dict[str, int], most: int) -> list[str]:
    """Rarest first, as many of ``words`` as hold no more than ``most`` turns in all (the
    rarest always), in the order given."""
    kept: set[str] = set()
    total = 0
    for word in sorted(words, key=lambda w: counts.get(w, 0)):
        total += counts.get(word, 0)
        if kept and total > most:
            break
        kept.add(word)
    return [w for w in words if w in kept]


def _documents(conn: apsw.Connection, tokenize: Callable[..., Any], word: str) -> int:
    """Turns whose content holds ``word`` as the index stems it (its commonest token)."""
    found = [conn.execute(_DOCUMENTS, (token,)).fetchall()
             for _, _, token in tokenize(word.encode(), apsw.FTS5_TOKENIZE_QUERY, None)]
    return max((cast("int", rows[0][0]) for rows in found if rows), default=0)


def match_expression(scope: Scope, query: str) -> str | None:
    """The FTS5 expression for ``query`` within ``scope``; None if it has no words."""
    return words_expression(scope, terms(query))


def words_expression(scope: Scope, words: list[str]) -> str | None:
    """The FTS5 expression for any of ``words`` within ``scope``; None if there are none."""
    if not words:
        return None
    # Inside double quotes FTS5 syntax has no meaning; the words hold no quote anyway.
    return f"{scope.match()} AND {content_expression(words)}"


def content_expression(words: list[str]) -> str:
    any_word = " OR ".join(f'"{word}"' for word in words)
    return f"content : ({any_word})"


def search(
    conn: apsw.Connection, scope: Scope, query: str, limit: int, *, scope_turns: int = 0,
    leave_out: Collection[str] = (),
) -> list[tuple[str, float]]:
    """Ids of the scope's best ``limit`` lexical matches and their BM25 score, best first.

    Scores are positive and larger for better matches (FTS5's ``bm25()`` is negated); a
    tie goes to the newer turn. ``scope_turns``: how many turns the caller knows the scope
    holds at least (0: unknown), which may spare the scope's token (:data:`WHOLE_SHARE`).
    ``leave_out``: case-folded words not searched, unless the query has no others.
    """
    words = terms(query)
    words = [w for w in words if w not in leave_out] or words
    if not words or limit <= 0:
        return []
    try:
        with conn:  # a savepoint: the look at `erasing` and the search read one snapshot
            words = rare_terms(conn, words)
            turns = cast("int | None", conn.execute(_TURNS).fetchall()[0][0])
            share = scope_turns / turns if turns else 0.0
            whole = _whole(conn, scope, words, limit, share) if share >= WHOLE_SHARE else None
            found = _scoped(conn, scope, words, limit) if whole is None else whole
    except apsw.SQLError as exc:
        if "no such table" in str(exc):
            return []  # a database the writer has not migrated yet: no index
        raise
    return found


def _scoped(conn: apsw.Connection, scope: Scope, words: list[str], limit: int
            ) -> list[tuple[str, float]]:
    expression = words_expression(scope, words)
    erasing = conn.execute(_ERASING).fetchall()[0][0]
    sql = _SEARCH if erasing else _SEARCH_ALL_VISIBLE
    rows = conn.execute(sql, (*BM25_WEIGHTS, expression, limit)).fetchall()
    # The columns are TEXT and REAL by construction; no per-row conversion needed.
    return cast("list[tuple[str, float]]", rows)


def _whole(conn: apsw.Connection, scope: Scope, words: list[str], limit: int, share: float
           ) -> list[tuple[str, float]] | None:
    """The scope's best ``limit`` among the best matches of the whole index; None when
    those hold fewer than ``limit`` of the scope's and there were more matches."""
    asked = math.ceil(1.1 * limit / min(share, 1.0))
    inside = f"{scope.condition('m')} AND {visible('m')}"
    weights = dict(zip(("w0", "w1", "w2", "w3"), BM25_WEIGHTS, strict=True))
    rows = conn.execute(_SEARCH_WHOLE.format(inside=inside), {
        **scope.params(), **weights, "match": content_expression(words), "limit": asked,
    }).fetchall()
    kept = [(message_id, score) for message_id, score, ok in rows if ok][:limit]
    if len(kept) < limit and len(rows) == asked:
        return None
    return cast("list[tuple[str, float]]", kept)
