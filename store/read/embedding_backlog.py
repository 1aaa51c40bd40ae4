"""How far embedding is behind: the messages still waiting for a vector.

A message waits when it has no vector of the configured model, no embedding error, and is
not blank (blank messages are never sent to the model). ``memq status`` and the metrics
show how old the oldest waiting message is; ``get_context`` asks whether its scope (a
session, or a user's or agent's sessions) has any, to say that its semantic search was
partial, and finds those by their words instead.

The global questions are answered by seeks in the partial index
``messages_embedding_backlog`` (migration 0006; rows by model, then position, NULL model
first): one seek for the never-embedded messages and one per other model that ever
embedded a message, however large the database. A message's age is counted from when the
writer recorded it (``events.recorded_at``), not from the producer's ``created_at``, which
an import may set years back.
"""

from __future__ import annotations

from collections.abc import Iterator
from datetime import UTC, datetime
from typing import cast

import apsw

from memq.clock import parse_rfc3339
from memq.store.read import lexical
from memq.store.read.hidden import visible
from memq.store.read.scope import Scope

EMBEDDABLE = "embedding_error IS NULL AND trim(content, char(32, 9, 10, 11, 12, 13)) <> ''"
"""These terms repeat the WHERE clause of the partial index messages_embedding_backlog
word for word: SQLite uses a partial index only when they match."""

_FIRST_NEVER_EMBEDDED = f"""
    SELECT min(seq) FROM messages WHERE embedding_model IS NULL AND {EMBEDDABLE}
      AND {visible()}"""
_FIRST_OF_MODEL = f"""
    SELECT min(seq) FROM messages WHERE embedding_model = ? AND {EMBEDDABLE}
      AND {visible()}"""
_NEXT_MODEL = f"""
    SELECT min(embedding_model) FROM messages
    WHERE embedding_model > ? AND {EMBEDDABLE}"""
_RECORDED_AT = "SELECT recorded_at FROM events WHERE seq = ?"
_WAITING = f"(embedding_model IS NULL OR embedding_model IS NOT ?) AND {EMBEDDABLE}"
_IN_SCOPE = f"""
    SELECT count(*) FROM messages
    WHERE {{scope}} AND seq >= :first
      AND (embedding_model IS NULL OR embedding_model IS NOT :model) AND {EMBEDDABLE}
      AND {visible()}"""
_LEXICAL_WAITING = f"""
    SELECT m.id, -bm25(messages_fts, ?, ?, ?, ?) AS score
    FROM messages_fts JOIN messages m ON m.seq = messages_fts.rowid
    WHERE messages_fts MATCH ? AND m.seq >= ?
      AND (m.embedding_model IS NULL OR m.embedding_model IS NOT ?)
      AND m.embedding_error IS NULL AND {visible("m")}
    ORDER BY score DESC, m.seq DESC
    LIMIT ?"""


def first_waiting(conn: apsw.Connection, model: str) -> int | None:
    """The log position of the oldest message waiting for a vector of ``model``."""
    firsts = [_scalar(conn, _FIRST_NEVER_EMBEDDED, ())]
    firsts += [_scalar(conn, _FIRST_OF_MODEL, (other,)) for other in _models(conn)
               if other != model]
    found = [int(seq) for seq in firsts if isinstance(seq, int)]
    return min(found) if found else None


def oldest_age_s(conn: apsw.Connection, model: str, now: datetime | None = None) -> float | None:
    """Seconds since the writer recorded the oldest waiting message; None if none waits."""
    seq = first_waiting(conn, model)
    row = None if seq is None else conn.execute(_RECORDED_AT, (seq,)).fetchone()
    if row is None:
        return None
    recorded = parse_rfc3339(str(row[0]))
    return max(0.0, ((now or datetime.now(UTC)) - recorded).total_seconds())


def waiting_in_scope(conn: apsw.Connection, scope: Scope, model: str) -> int:
    """How many of the scope's messages wait for a vector of ``model``."""
    first = first_waiting(conn, model)
    if first is None:
        return 0  # the usual case, answered by the seeks alone
    sql = _IN_SCOPE.format(scope=scope.condition())
    count = conn.execute(sql, {**scope.params(), "first": first, "model": model}).get
    return count if isinstance(count, int) else 0


def lexical_waiting(
    conn: apsw.Connection, scope: Scope, query: str, model: str, limit: int
) -> list[tuple[str, float]]:
    """The scope's best ``limit`` lexical matches among its waiting messages, BM25 first.

    Where the semantic search is blind (no vector yet), the words still find a message.
    """
    first = first_waiting(conn, model)
    expression = lexical.match_expression(scope, query)
    if first is None or expression is None or limit <= 0:
        return []
    rows = conn.execute(_LEXICAL_WAITING,
                        (*lexical.BM25_WEIGHTS, expression, first, model, limit)).fetchall()
    # The columns are TEXT and REAL by construction, as in read/lexical.py.
    return cast("list[tuple[str, float]]", rows)


def _models(conn: apsw.Connection) -> Iterator[str]:
    """Each model that embedded some waiting-eligible message, one seek each."""
    model = _scalar(conn, _NEXT_MODEL, ("",))
    while model is not None:
        yield str(model)
        model = _scalar(conn, _NEXT_MODEL, (model,))


def _scalar(conn: apsw.Connection, sql: str, params: tuple[object, ...]) -> object | None:
    row = conn.execute(sql, params).fetchone()
    return None if row is None else row[0]
