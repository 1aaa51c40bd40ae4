"""What the retrieval branches read: working memory, the read-only pool, the vector cache.

:class:`SessionSources` implements :class:`~producers.retrieval.Sources`. Its methods take
session ids that ``get_context`` has already validated, which is why they are not
methods of the client itself.

A database file that does not exist yet (an agent started before the writer ever ran)
reads as an empty history; any other storage error is raised.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any

import apsw
import numpy as np
import orjson

from producers.messages import MESSAGE_COLUMNS, Message, chronological_key, message_from_row
from producers.working_memory import WorkingMemory
from store import lexical
from store.reader import ReadPool
from store.summaries import timeline
from store.vector_cache import VectorCache

IMPORTANCE_WINDOW = 1000
"""Newest turns searched for important ones before the importance index is used."""

_IMPORTANT_BY_INDEX = f"""
    SELECT {MESSAGE_COLUMNS} FROM messages WHERE session_id = ? AND importance >= ?
    ORDER BY created_at DESC, seq DESC LIMIT ?"""
_IMPORTANT_AMONG_NEWEST = f"""
    SELECT {MESSAGE_COLUMNS} FROM messages WHERE id IN (
        SELECT id FROM (
            SELECT id, importance FROM messages INDEXED BY messages_by_session
            WHERE session_id = ? ORDER BY created_at DESC, seq DESC LIMIT ?)
        WHERE importance >= ? LIMIT ?)"""
# Row values: turns that share a timestamp (an import) are ordered by their position.
_NEXT_COLUMNS = ", ".join(f"n.{c.strip()}" for c in MESSAGE_COLUMNS.split(","))
_FOLLOWING = f"""
    SELECT m.id, {_NEXT_COLUMNS} FROM messages m JOIN messages n ON n.id = (
        SELECT id FROM messages WHERE session_id = m.session_id
            AND (created_at, seq) > (m.created_at, m.seq)
        ORDER BY created_at, seq LIMIT 1)
    WHERE m.id IN (SELECT value FROM json_each(?)) AND m.session_id = ?"""


class SessionSources:
    """Reads for the branches of ``get_context``; safe to share between threads."""

    def __init__(
        self, readers: ReadPool, vector_cache: VectorCache,
        query_vector: Callable[[str], np.ndarray], *, cap: int, max_sessions: int,
        verbatim: int = 0,
    ) -> None:
        self.readers = readers
        self.verbatim = verbatim
        self.vector_cache = vector_cache
        self.query_vector = query_vector
        self._database_seen = False
        self.working_memory = WorkingMemory(self.load_recent, cap=cap, max_sessions=max_sessions)

    def recent(self, session_id: str, limit: int) -> list[Message]:
        return self.working_memory.recent(session_id, limit)

    def important(self, session_id: str, threshold: float, limit: int) -> list[Message]:
        committed = self._important_committed(session_id, threshold, limit)
        # Read-your-writes: turns sent but not yet committed are only in working memory.
        pending = [m for m in self.working_memory.recent(session_id, self.working_memory.cap)
                   if m.importance >= threshold]
        unique = {m.id: m for m in [*committed, *pending]}
        return sorted(unique.values(), key=chronological_key, reverse=True)[:limit]

    def similar(
        self, session_id: str, query: str, threshold: float, limit: int
    ) -> list[tuple[Message, float]]:
        hits = self.similar_scores(session_id, query, threshold, limit)
        rows = {m.id: m for m in self.messages([mid for mid, _ in hits])}
        gone = [mid for mid, _ in hits if mid not in rows]
        if gone:  # deleted since they were cached
            self.vector_cache.discard(session_id, gone)
        return [(rows[mid], score) for mid, score in hits if mid in rows]

    def similar_scores(
        self, session_id: str, query: str, threshold: float, limit: int
    ) -> list[tuple[str, float]]:
        """Ids and cosines of up to ``limit`` turns with cosine > ``threshold``, best first."""
        if not self.database_exists():
            return []
        return self.vector_cache.search(session_id, self.query_vector(query), threshold, limit)

    def similarities(self, session_id: str, query: str, ids: Iterable[str]) -> dict[str, float]:
        """Cosine of the query to each of ``ids`` that has a vector of the current model."""
        if not self.database_exists():
            return {}
        return self.vector_cache.scores(session_id, ids, self.query_vector(query))

    def lexical(self, session_id: str, query: str, limit: int) -> list[tuple[Message, float]]:
        """Up to ``limit`` committed turns matching ``query``'s words, best BM25 first."""
        hits = self.lexical_scores(session_id, query, limit)
        rows = {m.id: m for m in self.messages([mid for mid, _ in hits])}
        return [(rows[mid], score) for mid, score in hits if mid in rows]

    def lexical_scores(self, session_id: str, query: str, limit: int) -> list[tuple[str, float]]:
        """Ids and BM25 scores of up to ``limit`` committed matching turns, best first."""
        if not self.database_exists():
            return []
        with self.readers.connection() as conn:
            try:
                return lexical.search(conn, session_id, query, limit)
            except apsw.SQLError as exc:
                if "no such table" in str(exc):
                    return []  # a database the writer has not migrated yet: no index
                raise

    def semantic_moments(self, session_id: str, query: str) -> tuple[float, float] | None:
        """Mean and standard deviation of the query's cosine over the session's vectors."""
        if not self.database_exists():
            return None
        return self.vector_cache.moments(session_id, self.query_vector(query))

    def following(self, session_id: str, ids: Iterable[str]) -> dict[str, Message]:
        """The committed turn right after each of ``ids`` in the session, if there is one."""
        wanted = orjson.dumps(list(ids)).decode()
        if wanted == "[]" or not self.database_exists():
            return {}
        with self.readers.connection() as conn:
            rows = conn.execute(_FOLLOWING, (wanted, session_id)).fetchall()
        return {str(row[0]): message_from_row(row[1:]) for row in rows}

    def load_recent(self, session_id: str, limit: int) -> list[Message]:
        """The last ``limit`` committed items, oldest first (hydrates working memory).

        The newest ``verbatim`` turns (the recency window) come as they are; before them a
        consolidated turn is replaced by its summary, so older history costs fewer items.
        """
        if not self.database_exists():
            return []
        with self.readers.connection() as conn:
            rows = timeline(conn, session_id, limit, verbatim=self.verbatim)
        return [message_from_row(row) for row in rows]

    def messages(self, ids: list[str]) -> list[Message]:
        if not ids:
            return []
        marks = ", ".join("?" * len(ids))
        return self._select(f"SELECT {MESSAGE_COLUMNS} FROM messages WHERE id IN ({marks})",
                            tuple(ids))

    def database_exists(self) -> bool:
        # Once there, a database stays: stat it only until it has appeared.
        if not self._database_seen:
            self._database_seen = Path(self.readers.db_path).exists()
        return self._database_seen

    def _important_committed(self, session_id: str, threshold: float, limit: int) -> list[Message]:
        # Where important turns are common, walking back from the newest finds `limit` of
        # them at once; where they are rare, that walk would read the whole session, and
        # the importance index is the quick way. Try the first on a bounded window.
        found = self._select(_IMPORTANT_AMONG_NEWEST,
                             (session_id, IMPORTANCE_WINDOW, threshold, limit))
        if len(found) < limit:
            found = self._select(_IMPORTANT_BY_INDEX, (session_id, threshold, limit))
        return found

    def _select(self, sql: str, params: tuple[Any, ...]) -> list[Message]:
        if not self.database_exists():
            return []
        with self.readers.connection() as conn:
            return [message_from_row(row) for row in conn.execute(sql, params)]
