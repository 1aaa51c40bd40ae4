"""``get_context``: what an agent should see of a session before its next turn.

The branches of the configured profile (see :mod:`producers.retrieval`) each find
messages; the result holds each message once, oldest first, with the branches that
found it and each branch's score. The semantic branch embeds the query in this process
with the workers' model (loaded on first use; repeated queries come from a small LRU)
and searches the session's vectors in :class:`~store.vector_cache.VectorCache`.

The search itself is numpy on one core: BLAS threads compete with the embedding model's
on a small machine, so run agents with ``OPENBLAS_NUM_THREADS=1`` when both share cores.
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from types import MappingProxyType
from typing import Any

import numpy as np

from memq.config import Config
from memq.embedding import Embedder
from memq.errors import ValidationError
from memq.events import check_identifier
from producers.messages import MESSAGE_COLUMNS, Message, chronological_key, message_from_row
from producers.retrieval import Found, Profile, profile_for
from producers.working_memory import WorkingMemory
from store.reader import ReadPool
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


@dataclass(frozen=True)
class ContextItem:
    """One message of a context, and why it is there.

    ``scores`` maps each branch that found the message to its score there: ``recency``
    the position from the newest (1 = newest), ``importance`` the importance,
    ``semantic`` the cosine similarity. ``similarity`` is the cosine to the query of any
    message with a vector of the current model (None without a query or a vector).
    """

    id: str
    session_id: str
    role: str
    content: str
    created_at: str
    importance: float
    branches: tuple[str, ...]
    similarity: float | None
    scores: Mapping[str, float] = field(default_factory=dict, hash=False)

    def to_dict(self) -> dict[str, Any]:
        return {
            "id": self.id, "session_id": self.session_id, "role": self.role,
            "content": self.content, "created_at": self.created_at,
            "importance": self.importance, "branches": list(self.branches),
            "similarity": self.similarity, "scores": dict(self.scores),
        }


class QueryVectors:
    """Query text -> unit vector, with the last ``size`` (at least 1) queries remembered."""

    def __init__(self, embedder: Embedder, size: int) -> None:
        self.embedder = embedder
        # At least one: get_context asks for the same query's vector twice per call.
        self.size = max(1, size)
        self._cache: OrderedDict[str, np.ndarray] = OrderedDict()
        self._lock = threading.Lock()

    def __call__(self, text: str) -> np.ndarray:
        with self._lock:
            cached = self._cache.get(text)
            if cached is not None:
                self._cache.move_to_end(text)
                return cached
        vector: np.ndarray = self.embedder.embed([text])[0]
        vector.setflags(write=False)  # shared between callers through the cache
        with self._lock:
            self._cache[text] = vector
            while len(self._cache) > self.size:
                self._cache.popitem(last=False)
        return vector


class ContextMixin:
    """``get_context`` and working memory for :class:`~producers.client.MemoryClient`."""

    config: Config
    readers: ReadPool

    def _setup_context(self) -> None:
        memory, retrieval, embed = self.config.memory, self.config.retrieval, self.config.embed
        self.profile: Profile = profile_for(retrieval)
        self.working_memory = WorkingMemory(
            self._load_recent, cap=memory.working_memory_cap, max_sessions=memory.max_sessions
        )
        self.vector_cache = VectorCache(
            self.readers, model_name=embed.model_name, dim=embed.dim,
            max_vectors=retrieval.vector_cache_max_vectors,
        )
        self.query_vectors = QueryVectors(Embedder(embed), retrieval.query_cache_size)

    def get_context(self, session_id: str, query: str | None = None) -> list[ContextItem]:
        """The session's context: every branch of the profile, deduplicated, oldest first.

        Without a query the semantic branch is skipped.
        """
        self._check_session(session_id)
        query = self._check_query(query)
        results = [
            (strategy.name, strategy.find(self, session_id, query))
            for strategy in self.profile.strategies
        ]
        found = self.profile.combine(results)
        similarity = self._similarities(session_id, query, found)
        return [_item(f, similarity.get(f.message.id)) for f in found]

    # -- Sources (read by the strategies) ---------------------------------------------

    def recent(self, session_id: str, limit: int) -> list[Message]:
        return self.working_memory.recent(session_id, limit)

    def important(self, session_id: str, threshold: float, limit: int) -> list[Message]:
        committed = self._important_committed(session_id, threshold, limit)
        # Read-your-writes: turns sent but not yet committed are only in working memory.
        pending = [m for m in self.working_memory.recent(session_id, self.working_memory.cap)
                   if m.importance >= threshold]
        unique = {m.id: m for m in [*committed, *pending]}
        return sorted(unique.values(), key=chronological_key, reverse=True)[:limit]

    def _important_committed(self, session_id: str, threshold: float, limit: int) -> list[Message]:
        # Where important turns are common, walking back from the newest finds `limit` of
        # them at once; where they are rare, that walk would read the whole session, and
        # the importance index is the quick way. Try the first on a bounded window.
        found = self._select(_IMPORTANT_AMONG_NEWEST, (session_id, IMPORTANCE_WINDOW,
                                                       threshold, limit))
        if len(found) < limit:
            found = self._select(_IMPORTANT_BY_INDEX, (session_id, threshold, limit))
        return found

    def similar(
        self, session_id: str, query: str, threshold: float, limit: int
    ) -> list[tuple[Message, float]]:
        if not self._database_exists():
            return []
        hits = self.vector_cache.search(session_id, self.query_vectors(query), threshold, limit)
        rows = {m.id: m for m in self._messages([mid for mid, _ in hits])}
        gone = [mid for mid, _ in hits if mid not in rows]
        if gone:  # deleted since they were cached
            self.vector_cache.discard(session_id, gone)
        return [(rows[mid], score) for mid, score in hits if mid in rows]

    # -- helpers ----------------------------------------------------------------------

    def _similarities(
        self, session_id: str, query: str | None, found: list[Found]
    ) -> dict[str, float]:
        if query is None or not found or not self._database_exists():
            return {}
        vector = self.query_vectors(query)
        return self.vector_cache.scores(session_id, (f.message.id for f in found), vector)

    def _load_recent(self, session_id: str, limit: int) -> list[Message]:
        rows = self._select(
            f"""SELECT {MESSAGE_COLUMNS} FROM messages WHERE session_id = ?
                ORDER BY created_at DESC, seq DESC LIMIT ?""",
            (session_id, limit),
        )
        return rows[::-1]

    def _messages(self, ids: list[str]) -> list[Message]:
        if not ids:
            return []
        marks = ", ".join("?" * len(ids))
        return self._select(f"SELECT {MESSAGE_COLUMNS} FROM messages WHERE id IN ({marks})",
                            tuple(ids))

    def _select(self, sql: str, params: tuple[Any, ...]) -> list[Message]:
        # An agent may start before the writer has ever created the database: until then
        # there is simply no history.
        if not self._database_exists():
            return []
        with self.readers.connection() as conn:
            return [message_from_row(row) for row in conn.execute(sql, params)]

    def _database_exists(self) -> bool:
        return Path(self.readers.db_path).exists()

    def _remember_appended(self, session_id: str, created_at: str, payload: Any) -> None:
        """Put a just-sent ``message.appended`` payload into working memory."""
        self.working_memory.add(Message(
            id=payload["message_id"], session_id=session_id, role=payload["role"],
            content=payload["content"], created_at=created_at,
            importance=payload["importance"], tool_call_id=payload.get("tool_call_id"),
            tool_name=payload.get("tool_name"), tool_calls=payload.get("tool_calls"),
        ))

    def _check_session(self, session_id: Any) -> None:
        check_identifier("session_id", session_id,
                         max_chars=self.config.limits.max_session_id_chars)

    def _check_query(self, query: Any) -> str | None:
        if query is None:
            return None
        if not isinstance(query, str):
            raise ValidationError(f"query must be a string or None, got {type(query).__name__}")
        if not query.strip():
            raise ValidationError("query must not be blank; pass None to skip the semantic branch")
        size = len(query.encode("utf-8", "surrogatepass"))
        if size > self.config.limits.max_content_bytes:
            limit = self.config.limits.max_content_bytes
            raise ValidationError(f"query is {size} bytes, over the {limit} byte limit")
        return query


def _item(found: Found, similarity: float | None) -> ContextItem:
    m = found.message
    return ContextItem(
        id=m.id, session_id=m.session_id, role=m.role, content=m.content,
        created_at=m.created_at, importance=m.importance, branches=tuple(found.scores),
        similarity=found.scores.get("semantic", similarity),
        scores=MappingProxyType(dict(found.scores)),
    )
