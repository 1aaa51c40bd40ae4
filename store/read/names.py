"""Who a question names, and which of a scope's sessions name them too.

A user's history holds many conversations that look alike: the same kinds of talk with
other people. A question about one person ("What did Caroline paint?") is better answered
from the sessions where that person is named, and a turn there need not say the name
itself (her own turns, an answer to her). So the unit is the session: a candidate turn
counts as naming someone when its session does, and the others lose a share of their score
(rule 6 of :mod:`producers.ranking.fusion`); where those sessions hold less than half of the
scope, their turns are also searched as a scope of their own (:func:`named_turns`, rule 7).

A name is a word written with a capital that grammar does not explain: not a sentence's
first word, not "I", not a function word. Names the index finds in no turn, or in more
than :data:`~store.read.lexical.COMMON_SHARE` of them (the user's own name, say) or
:data:`MOST_TURNS`, or in more than :data:`MAX_SESSIONS` of the scope's sessions, single
out nothing and are not looked for.
"""

from __future__ import annotations

import re
from collections.abc import Collection
from typing import NamedTuple, cast

import apsw
import orjson

from memq.store.read import lexical
from memq.store.read.hidden import visible
from memq.store.read.scope import Scope

MAX_NAMES = 8
"""A query's first this many names are looked for (a long query stays cheap)."""

MOST_TURNS = 5000
"""A name said in more turns than this is not looked for, whatever the history's size: the
lookup reads every turn that says it, and a name that common singles out little (at
1,000,000 turns the share alone would allow 20,000 a name, 160,000 for a question's
eight)."""

_SENTENCE = re.compile(r"[.!?;:\n]+")

# Which of the candidates are turns of the naming sessions.
_IN_SESSIONS = """
    SELECT m.id FROM json_each(:ids) AS wanted
    CROSS JOIN messages m ON m.id = wanted.value
    WHERE m.session_id IN (SELECT value FROM json_each(:sessions))"""


MAX_SESSIONS = 256
"""A word said in more of a scope's sessions than this is no name that singles anyone out
(an acronym, a nickname every copy of a conversation uses: in a history of 100,119 turns,
"LGBTQ" and "Mel" were said in more, and reading their matches and the turns of 256 of
their sessions took a call's slowest named scopes 8-16 ms). And the named scope reads at
most this many sessions, those that named them last: each costs a read of its own (one
turn from each of 2,000 sessions took 41 ms; 2,000 turns of ~20-turn sessions, 3 ms)."""

# Per word, so that a word said in too many sessions can be told apart from the others.
_WORD_SESSIONS = f"""
    SELECT n.session_id, max(n.seq)
    FROM messages_fts JOIN messages n ON n.seq = messages_fts.rowid
    WHERE messages_fts MATCH :match AND {{scope}} AND {visible("n")}
    GROUP BY n.session_id LIMIT :sessions"""

# The session's index gives its turns newest first, so a session costs the turns taken.
_SESSION_TURNS = f"""
    SELECT m.id FROM messages m INDEXED BY messages_by_session
    WHERE m.session_id = :session AND {{scope}} AND {visible("m")}
    ORDER BY m.created_at DESC, m.seq DESC LIMIT :limit"""


class Named(NamedTuple):
    """Who a question names that some sessions of the scope name too, and those sessions'
    turns."""

    words: list[str]
    """The names asked about (as :func:`names` gives them) that the index holds, but for
    those too common to single anyone out: the sessions hold one of them at least."""
    turns: list[str]
    """Ids of the naming sessions' turns: the sessions that named them last first, each
    session's newest turns first."""
    sessions: frozenset[str]
    """Every session of the scope that names them (rule 6 tests its candidates against
    them, :func:`in_sessions`); only the latest :data:`MAX_SESSIONS` are read."""


def names(query: str) -> list[str]:
    """The distinct, case-folded words ``query`` capitalises where grammar does not."""
    found: dict[str, None] = {}
    for sentence in _SENTENCE.split(lexical.without_contractions(query)):
        for word in lexical.WORD.findall(sentence)[1:]:
            folded = word.casefold()
            if word[0].isupper() and folded != "i" and folded not in lexical.STOPWORDS:
                found.setdefault(folded)
    return list(found)[:MAX_NAMES]


def naming(conn: apsw.Connection, scope: Scope, words: list[str], ids: list[str]
           ) -> set[str]:
    """Those of ``ids`` (turns of ``scope``) whose session holds one of ``words`` (names as
    :func:`names` gives them), those that single out no one left aside."""
    if not words or not ids:
        return set()
    try:
        with conn:  # one snapshot: the sessions found and the candidates tested
            found = in_sessions(conn, ids, _naming_sessions(conn, scope, words)[1])
    except apsw.SQLError as exc:
        if "no such table" in str(exc):
            return set()  # a database the writer has not migrated yet: no index
        raise
    return found


def in_sessions(conn: apsw.Connection, ids: list[str], sessions: Collection[str]) -> set[str]:
    """Those of ``ids`` whose session is one of ``sessions``: what :func:`naming` gives
    when the sessions are those that name whom it asks about (:attr:`Named.sessions`),
    without reading every turn that names them a second time."""
    if not ids or not sessions:
        return set()
    rows = conn.execute(_IN_SESSIONS, {"ids": orjson.dumps(ids).decode(),
                                       "sessions": orjson.dumps(sorted(sessions)).decode()})
    return {str(row[0]) for row in rows}


def named_turns(conn: apsw.Connection, scope: Scope, words: list[str], limit: int,
                most: int) -> Named | None:
    """Up to ``limit`` turns of the sessions of ``scope`` that hold one of ``words`` (names
    as :func:`names` gives them, those too common to single anyone out left aside); None
    when no session does, or when those sessions hold more than ``most`` turns: then they
    are not a part of the scope but most of it. A session is read newest turn first, and
    whole if the limit allows, so the cost is the turns taken, however long the history."""
    if not words or limit <= 0 or most <= 0:
        return None
    try:
        with conn:  # one snapshot: the sessions found and the turns read
            said, latest = _naming_sessions(conn, scope, words)
            last_first = sorted(latest, key=lambda session: -latest[session])
            turns = _turns_of(conn, scope, last_first[:MAX_SESSIONS], min(limit, most + 1))
    except apsw.SQLError as exc:
        if "no such table" in str(exc):
            return None  # a database the writer has not migrated yet: no index
        raise
    return Named(said, turns, frozenset(latest)) if 0 < len(turns) <= most else None


def _naming_sessions(conn: apsw.Connection, scope: Scope, words: list[str]
                     ) -> tuple[list[str], dict[str, int]]:
    """Those of ``words`` that single someone out in ``scope``, and the sessions that say
    them, each with the position of its latest turn that does. A word singles no one out
    if the index holds it in no turn, or in too many (:func:`lexical.uncommon`,
    :data:`MOST_TURNS`), or if more than :data:`MAX_SESSIONS` of the scope's sessions say
    it; nor does one that none of them says."""
    sql = _WORD_SESSIONS.format(scope=scope.condition("n"))
    said: list[str] = []
    latest: dict[str, int] = {}
    for word in lexical.uncommon(conn, words, missing=[], most=MOST_TURNS):
        rows = conn.execute(sql, {**scope.params(), "sessions": MAX_SESSIONS + 1,
                                  "match": lexical.content_expression([word])}).fetchall()
        if 0 < len(rows) <= MAX_SESSIONS:
            said.append(word)
            for session, seq in rows:
                latest[str(session)] = max(latest.get(str(session), 0), cast("int", seq))
    return said, latest


def _turns_of(conn: apsw.Connection, scope: Scope, sessions: list[str], limit: int
              ) -> list[str]:
    sql = _SESSION_TURNS.format(scope=scope.condition("m"))
    turns: list[str] = []
    for session in sessions:
        if len(turns) >= limit:
            break
        rows = conn.execute(sql, {**scope.params(), "session": session,
                                  "limit": limit - len(turns)}).fetchall()
        turns.extend(str(row[0]) for row in rows)
    return turns
