"""What the retrieval branches read: working memory, the read-only pool, the vector cache.

:class:`SessionSources` implements :class:`~producers.ranking.profiles.Sources`. Its methods take
session ids and scopes that ``get_context`` has already validated and resolved, which is
why they are not methods of the client itself. Recency and working memory are the asking
session's; everything else reads the scope (:mod:`store.read.scope`).

A database that is not there yet (an agent started before the writer, or while it creates
or migrates the database) reads as an empty history (``ReadPool(empty_until_ready=True)``);
any other storage error is raised.
"""

from __future__ import annotations

import copy
from collections.abc import Callable, Collection, Iterable, Sequence

import numpy as np

from memq.producers.ranking.profiles import Query
from memq.producers.working_memory import PositionReader, WorkingMemory
from memq.reranker import Reranker
from memq.store.read import embedding_backlog as backlog
from memq.store.read import lexical, names, sessions
from memq.store.read import messages as stored
from memq.store.read.messages import Message, chronological_key
from memq.store.read.pool import ReadPool
from memq.store.read.scope import Scope
from memq.store.read.sessions import Owner, SessionSnapshot
from memq.store.read.vector_cache import VectorCache


class SessionSources:
    """Reads for the branches of ``get_context``; safe to share between threads."""

    def __init__(
        self, readers: ReadPool, vector_cache: VectorCache,
        query_vector: Callable[[str], np.ndarray], *, cap: int, max_sessions: int,
        verbatim: int = 0, commit_position: PositionReader | None = None,
        reranker: Reranker | None = None,
    ) -> None:
        self.readers = readers
        self.reranker = reranker
        self.verbatim = verbatim
        self.vector_cache = vector_cache
        self.query_vector = query_vector
        self.working_memory = WorkingMemory(
            self.load_recent, self.mark, cap=cap, max_sessions=max_sessions,
            commit_position=commit_position)

    def with_own_working_memory(self, commit_position: PositionReader) -> SessionSources:
        """These reads for another principal: the same pool and caches, and a working
        memory of its own, whose pending turns settle against ``commit_position``. Its
        outbox sends to a queue of its own, whose positions mean nothing against another
        queue's (a key's turn judged by the agents' queue would never settle, or settle at
        once), and its uncommitted turns are no one else's to read."""
        twin = copy.copy(self)
        mine = self.working_memory
        twin.working_memory = WorkingMemory(
            twin.load_recent, twin.mark, cap=mine.cap, max_sessions=mine.max_sessions,
            commit_position=commit_position)
        return twin

    def sync(self, session_id: str) -> None:
        """Bring the session's working memory up to date with what is committed."""
        self.working_memory.sync(session_id)

    def recent(self, session_id: str, limit: int) -> list[Message]:
        return self.working_memory.recent(session_id, limit)

    def important(self, scope: Scope, threshold: float, limit: int) -> list[Message]:
        committed = self._important_committed(scope, threshold, limit)
        # Read-your-writes: turns sent but not yet committed are only in working memory.
        recent = self.working_memory.recent(scope.session_id, self.working_memory.cap)
        pending = [m for m in recent if m.importance >= threshold]
        unique = {m.id: m for m in [*committed, *pending]}
        return sorted(unique.values(), key=chronological_key, reverse=True)[:limit]

    def similar(
        self, scope: Scope, query: str, threshold: float, limit: int
    ) -> list[tuple[Message, float]]:
        hits = self.similar_scores(scope, query, threshold, limit)
        rows = {m.id: m for m in self.messages([mid for mid, _ in hits])}
        gone = [mid for mid, _ in hits if mid not in rows]
        if gone:  # deleted since they were cached
            self.vector_cache.discard(scope, gone)
        return [(rows[mid], score) for mid, score in hits if mid in rows]

    def similar_scores(
        self, scope: Scope, query: Query, threshold: float, limit: int, *, keys: bool = False
    ) -> list[tuple[str, float]]:
        """Ids and cosines of up to ``limit`` turns with cosine > ``threshold``, best first
        (``keys``: scored by their contextual keys)."""
        if not self.database_exists():
            return []
        return self.vector_cache.search(scope, self._vector(query), threshold, limit,
                                        keys=keys)

    def similarities(self, scope: Scope, query: Query, ids: Iterable[str],
                     *, keys: bool = False) -> dict[str, float]:
        """Cosine of the query to each of ``ids`` that has a vector of the current model."""
        if not self.database_exists():
            return {}
        return self.vector_cache.scores(scope, ids, self._vector(query), keys=keys)

    def best_among(self, scope: Scope, query: Query, ids: Sequence[str], limit: int,
                   *, keys: bool = False) -> list[tuple[str, float]]:
        """Ids and cosines of the ``limit`` of ``ids`` nearest the query, best first."""
        if not ids or not self.database_exists():
            return []
        return self.vector_cache.best_among(scope, ids, self._vector(query), limit, keys=keys)

    def vectors(self, scope: Scope, ids: Sequence[str], *, turned: bool = False
                ) -> dict[str, np.ndarray]:
        """The stored vector of each of ``ids`` that has one (``turned``: see
        :meth:`VectorCache.vectors`)."""
        if not self.database_exists():
            return {}
        return self.vector_cache.vectors(scope, ids, turned=turned)

    def _vector(self, query: Query) -> np.ndarray:
        return query if isinstance(query, np.ndarray) else self.query_vector(query)

    def lexical(self, scope: Scope, query: str, limit: int) -> list[tuple[Message, float]]:
        """Up to ``limit`` committed turns matching ``query``'s words, best BM25 first."""
        hits = self.lexical_scores(scope, query, limit)
        rows = {m.id: m for m in self.messages([mid for mid, _ in hits])}
        return [(rows[mid], score) for mid, score in hits if mid in rows]

    def lexical_scores(self, scope: Scope, query: str, limit: int,
                       leave_out: Collection[str] = ()) -> list[tuple[str, float]]:
        """Ids and BM25 scores of up to ``limit`` committed matching turns, best first
        (``leave_out``: words not searched, see :func:`lexical.search`)."""
        if not self.database_exists():
            return []
        # The vectors cached for the scope are turns it holds at least: what the search
        # needs to know to leave the scope out of its match (lexical.WHOLE_SHARE).
        known = self.vector_cache.vector_count(scope)
        with self.readers.connection() as conn:
            return lexical.search(conn, scope, query, limit, scope_turns=known,
                                  leave_out=leave_out)

    def waiting_for_vectors(self, scope: Scope) -> int:
        """How many of the scope's committed turns the semantic search cannot see yet
        (no vector of the current model: embedding is behind)."""
        if not self.database_exists():
            return 0
        with self.readers.connection() as conn:
            return backlog.waiting_in_scope(conn, scope, self.vector_cache.model_name)

    def lexical_waiting(
        self, scope: Scope, query: str, limit: int
    ) -> list[tuple[Message, float]]:
        """Up to ``limit`` turns still waiting for a vector that match the query's words."""
        if not self.database_exists():
            return []
        with self.readers.connection() as conn:
            hits = backlog.lexical_waiting(conn, scope, query,
                                           self.vector_cache.model_name, limit)
            rows = {m.id: m for m in stored.by_ids(conn, [mid for mid, _ in hits])}
        return [(rows[mid], score) for mid, score in hits if mid in rows]

    def semantic_moments(self, scope: Scope, query: Query,
                         *, keys: bool = False) -> tuple[float, float] | None:
        """Mean and standard deviation of the query's cosine over the scope's vectors."""
        if not self.database_exists():
            return None
        return self.vector_cache.moments(scope, self._vector(query), keys=keys)

    def following(self, scope: Scope, ids: Iterable[str]) -> dict[str, Message]:
        """The committed turn right after each of ``ids`` in its session, if there is one."""
        if not self.database_exists():
            return {}
        with self.readers.connection() as conn:
            return stored.following(conn, scope, ids)

    def rerank_scores(self, query: str, texts: Sequence[str]) -> list[float] | None:
        """The cross-encoder's score of each (query, text); None without a reranker."""
        return None if self.reranker is None else self.reranker.scores(query, texts)

    def naming(self, scope: Scope, query: str, ids: Sequence[str],
               sessions: Collection[str] | None = None) -> set[str]:
        """Those of ``ids`` whose session names someone ``query`` names (``sessions``: those
        sessions, when the named scope has found them already)."""
        asked = names.names(query)
        if not asked or not ids or not self.database_exists():
            return set()
        with self.readers.connection() as conn:
            if sessions is not None:
                return names.in_sessions(conn, list(ids), sessions)
            return names.naming(conn, scope, asked, list(ids))

    def named_turns(self, scope: Scope, query: str, limit: int) -> names.Named | None:
        """Whom ``query`` names that sessions of ``scope`` name too, and up to ``limit`` of
        those sessions' turns (:func:`names.named_turns`); None when those sessions hold
        half the scope or more."""
        asked = names.names(query)
        if not asked or not self.database_exists():
            return None
        most = (self.vector_cache.size(scope) - 1) // 2
        with self.readers.connection() as conn:
            return names.named_turns(conn, scope, asked, limit, most)

    def load_recent(self, session_id: str, limit: int) -> SessionSnapshot:
        """The session's mark and last ``limit`` committed items, oldest first (what
        working memory holds).

        The newest ``verbatim`` turns (the recency window) come as they are; before them a
        consolidated turn is replaced by its summary, so older history costs fewer items.
        """
        with self.readers.connection() as conn:
            return sessions.snapshot(conn, session_id, limit, verbatim=self.verbatim)

    def mark(self, session_id: str) -> int | None:
        """The position of the last committed change to the session's messages."""
        with self.readers.connection() as conn:
            return sessions.mark(conn, session_id)

    def owner(self, session_id: str) -> Owner | None:
        """Who the session belongs to; None while it has no committed message."""
        with self.readers.connection() as conn:
            return sessions.owner(conn, session_id)

    def messages(self, ids: list[str]) -> list[Message]:
        if not ids or not self.database_exists():
            return []
        with self.readers.connection() as conn:
            return stored.by_ids(conn, ids)

    def database_exists(self) -> bool:
        """Whether reads see the database yet (and are worth embedding a query for)."""
        return self.readers.is_ready()

    def _important_committed(self, scope: Scope, threshold: float, limit: int) -> list[Message]:
        if not self.database_exists():
            return []
        with self.readers.connection() as conn:
            return stored.important(conn, scope, threshold, limit)
