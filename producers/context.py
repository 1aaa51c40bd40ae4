"""``get_context``: what an agent should see of a session before its next turn.

The branches of the configured profile (see :mod:`producers.ranking.profiles`) each find
messages; the result holds each message once, oldest first, with the branches that
found it and each branch's score. The semantic branch embeds the query in this process
with the workers' model (loaded on first use; repeated queries come from a small LRU)
and searches the scope's vectors in :class:`~store.vector_cache.VectorCache`.

``scope`` says what the branches other than recency search: the session (``"session"``),
every session of the session's user (``"user"``) or of its user's agent (``"agent"``).
Recency and working memory stay the session's. A scope never crosses users; a session
without a user (or, for ``"agent"``, without an agent) searches only itself.

The search is numpy. On a small machine BLAS threads compete with the embedding model's
threads, so run agents with ``OPENBLAS_NUM_THREADS=1`` when both share the cores.
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from collections.abc import Mapping
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any

import numpy as np

from memq import tenants
from memq.embedding import Embedder
from memq.errors import StoreError, ValidationError
from memq.events import check_identifier, check_query
from memq.printable import shown
from memq.producers.mixin import ClientBase
from memq.producers.ops import Op, Run
from memq.producers.outbox import Ticket
from memq.producers.owners import Owners
from memq.producers.ranking.profiles import Found, Profile, profile_for
from memq.producers.ranking.sources import SessionSources
from memq.reranker import Reranker
from memq.store.read import erasures
from memq.store.read.fact_search import relevant_facts
from memq.store.read.messages import Message
from memq.store.read.scope import KINDS, Scope
from memq.store.read.vector_cache import VectorCache


@dataclass(frozen=True)
class ContextItem:
    """One message of a context, and why it is there.

    ``scores`` maps each branch that found the message to its score there: ``recency``
    the position from the newest (1 = newest), ``importance`` the importance,
    ``semantic`` the cosine similarity; the ``recall`` profile's relevance branch adds
    ``lexical`` (BM25), ``semantic_z`` (standard deviations above the session's mean
    cosine), ``neighbour`` (the share inherited from the turn before), ``fused``, and
    ``name_penalty`` where the question names someone other sessions name and this turn's
    does not (the share of its score it lost).
    ``similarity`` is the cosine to the query of any message with a vector of the
    current model (None without a query or a vector); ``lexical`` and ``fused`` repeat
    those scores (None where that evidence is absent), and ``neighbour_of`` names the
    turn whose relevance a turn inherited, when that is why it is here.
    With ``[retrieval] include_facts``, relevant facts follow the messages as items with
    ``id`` ``fact:<id>``, role ``system`` and the branch ``fact``.

    ``semantic_partial`` is True on every item when the search by meaning could not see
    some turns of the session because they have no vector yet (embedding is behind): a turn
    missing from the ``semantic`` branch may only be waiting. Those turns are still found by
    their words (the ``lexical`` branch).
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
    lexical: float | None = None
    fused: float | None = None
    neighbour_of: str | None = None
    semantic_partial: bool = False

    def to_dict(self) -> dict[str, Any]:
        return {
            "id": self.id, "session_id": self.session_id, "role": self.role,
            "content": self.content, "created_at": self.created_at,
            "importance": self.importance, "branches": list(self.branches),
            "similarity": self.similarity, "scores": dict(self.scores),
            "lexical": self.lexical, "fused": self.fused, "neighbour_of": self.neighbour_of,
            "semantic_partial": self.semantic_partial,
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


class ContextOps(ClientBase):
    """``get_context`` and working memory, for both clients (``producers/ops.py``)."""

    def _setup_context(self) -> None:
        memory, retrieval, embed = self.config.memory, self.config.retrieval, self.config.embed
        self.profile: Profile = profile_for(retrieval)
        self.vector_cache = VectorCache(
            self.readers, model_name=embed.model_name, dim=embed.dim,
            max_vectors=retrieval.vector_cache_max_vectors,
            context_weight=retrieval.recall_context_weight if self.profile.contextual else 0.0,
        )
        self.query_vectors = QueryVectors(Embedder(embed), retrieval.query_cache_size)
        self.sources = SessionSources(
            self.readers, self.vector_cache, self.query_vectors,
            cap=memory.working_memory_cap, max_sessions=memory.max_sessions,
            verbatim=retrieval.recency_limit, commit_position=self._commit_position,
            reranker=Reranker(retrieval.reranker_dir, threads=embed.threads)
            if retrieval.reranker_dir else None,
        )
        self.working_memory = self.sources.working_memory
        self.owners = Owners(self.sources.owner, max_sessions=memory.max_sessions)
        # Read on the first call, not here: a constructor that reads would refuse a client
        # of another database before it could send, and could fail while the writer migrates.
        self._erasures_seen: int | None = None

    def _get_context_op(
        self, session_id: str, query: str | None, scope: str
    ) -> Op[list[ContextItem]]:
        check_identifier("session_id", session_id,
                         max_chars=self.config.limits.max_session_id_chars)
        query = check_query(query, self.config.limits.max_content_bytes)
        _check_scope(scope)
        # One piece of blocking work: its reads go through working memory and the vector
        # cache, and the query's embedding is CPU-bound. The commit position matters only
        # to this process's own pending turns of the session.
        items: list[ContextItem] = yield Run(
            self._context, (session_id, query, scope),
            with_position=bool(self.working_memory.pending(session_id)))
        return items

    def _context(self, session_id: str, query: str | None, scope: str) -> list[ContextItem]:
        """``get_context`` once its arguments are checked (blocking: reads, the model)."""
        self._notice_erasures()
        self.sources.sync(session_id)
        within = self._scope(session_id, scope)
        with self.vector_cache.settled():
            results = [
                (strategy.name, strategy.find(self.sources, within, query))
                for strategy in self.profile.strategies
            ]
            found = self.profile.combine(results)
            similarity: dict[str, float] = {}
            unscored = [f.message.id for f in found if "semantic" not in f.scores]
            if query is not None and unscored:
                similarity = self.sources.similarities(within, query, unscored)
        partial = (query is not None and self.profile.searches_meaning
                   and self.sources.waiting_for_vectors(within) > 0)
        items = [_item(f, similarity.get(f.message.id), partial) for f in found]
        return items + self._fact_items(within, query)

    def _notice_erasures(self) -> None:
        """Drop what this process cached if anything was forgotten since it looked last.

        Working memory follows each session's mark (a forget moves or removes it); the
        vectors of every scope and the owners of sessions are dropped here, and read again
        when next used. Forgets are rare, so dropping everything is simple and cheap.
        """
        latest = self._latest_erasure()
        if self._erasures_seen is not None and latest != self._erasures_seen:
            self._drop_caches()
        self._erasures_seen = latest

    def _drop_caches(self) -> None:
        self.vector_cache.forget_where(lambda key: True)
        self.owners.clear()

    def _latest_erasure(self) -> int:
        if not self.sources.database_exists():
            return 0
        with self.readers.connection() as conn:
            return erasures.latest(conn)

    def _scope(self, session_id: str, kind: str) -> Scope:
        owner = None if kind == "session" else self.owners.get(session_id)
        return Scope.of(session_id, kind, owner)

    def _fact_items(self, scope: Scope, query: str | None) -> list[ContextItem]:
        """Facts relevant to the query, after the messages (``[retrieval] include_facts``):
        the global ones and those of the session's user."""
        retrieval = self.config.retrieval
        if not retrieval.include_facts or query is None:
            return []
        session_id = scope.session_id
        owner = self.owners.get(session_id)
        # A session of nobody sees its tenant's global facts, never another tenant's.
        user = owner.user_id if owner is not None and owner.user_id is not None else (
            tenants.everyone_beside(session_id))
        try:
            with self.readers.connection() as conn:
                matches = relevant_facts(conn, query, retrieval.facts_limit, user)
        except StoreError:
            return []  # no database yet: no facts either
        return [
            ContextItem(
                id=f"fact:{m.fact.id}", session_id=session_id, role="system",
                content=f"{m.fact.category}/{m.fact.key}: {m.fact.value}",
                created_at=m.fact.updated_at, importance=1.0, branches=("fact",),
                similarity=None, scores=MappingProxyType({"fact": m.score}),
            )
            for m in matches
        ]

    def _remember_appended(
        self, session_id: str, created_at: str, payload: Any, ticket: Ticket
    ) -> None:
        """Put a just-sent ``message.appended`` payload into working memory."""
        self.working_memory.add(Message(
            id=payload["message_id"], session_id=session_id, role=payload["role"],
            content=payload["content"], created_at=created_at,
            importance=payload["importance"], tool_call_id=payload.get("tool_call_id"),
            tool_name=payload.get("tool_name"), tool_calls=payload.get("tool_calls"),
        ), ticket)

def _check_scope(kind: Any) -> None:
    if not isinstance(kind, str) or kind not in KINDS:
        raise ValidationError(f"scope must be one of {', '.join(KINDS)}, got {shown(kind):.60}")


def _item(found: Found, similarity: float | None, semantic_partial: bool) -> ContextItem:
    m = found.message
    return ContextItem(
        id=m.id, session_id=m.session_id, role=m.role, content=m.content,
        created_at=m.created_at, importance=m.importance, branches=tuple(found.branches),
        similarity=found.scores.get("semantic", similarity),
        scores=MappingProxyType(dict(found.scores)),
        lexical=found.scores.get("lexical"), fused=found.scores.get("fused"),
        neighbour_of=found.neighbour_of, semantic_partial=semantic_partial,
    )
