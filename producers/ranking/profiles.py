"""Retrieval branches and the profiles that combine them for ``get_context``.

A *strategy* (a branch) finds messages of a scope by one criterion and scores each (a
scope is the asking session, or every session of its user or agent: recency always
reads the asking session's working memory, the other branches read the whole scope);
a *profile* is an ordered list of strategies, with their limits and thresholds, plus the
function that combines what they found. ``[retrieval] profile`` names the profile:

    tri-hybrid   recency (last N turns of working memory)
               + importance (importance ≥ threshold, newest first)
               + semantic (cosine to the query > threshold, best first)
               + lexical, only while embedding is behind: the turns without a vector yet
                 that match the query's words (BM25), so they are not simply missing
    recall       recency (a few last turns) + importance (a few)
               + relevance: lexical (BM25) and semantic evidence fused, with the turn
                 after each match (see :mod:`producers.ranking.fusion`), filling what is left
                 of a total budget of ``recall_budget`` items

Strategies read through :class:`Sources` (the client implements it), so a new branch is
a class with ``name`` and ``find``, and a new profile is one entry in :data:`PROFILES`.
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Iterable, Mapping, Sequence
from concurrent.futures import Future
from dataclasses import dataclass, field, replace
from typing import Protocol

import numpy as np

from memq.config import RetrievalConfig
from memq.errors import ConfigError
from memq.producers.ranking import alongside, fusion
from memq.store.read.messages import Message, chronological_key
from memq.store.read.names import Named
from memq.store.read.scope import Scope


@dataclass(frozen=True)
class Hit:
    """A message one branch found, with that branch's score for it.

    A branch that weighs several kinds of evidence (``relevance``) also says which found
    the message (``branches``) and gives each score by name (``details``).
    """

    message: Message
    score: float
    details: Mapping[str, float] = field(default_factory=dict, hash=False)
    branches: tuple[str, ...] = ()
    neighbour_of: str | None = None


Query = str | np.ndarray
"""What a search by meaning compares turns with: the query's text (embedded, cached), or
a vector of its own (the feedback round of ``relevance``)."""


class Sources(Protocol):
    """What strategies may read; sessions and scopes are already validated and resolved."""

    def recent(self, session_id: str, limit: int) -> list[Message]:
        """The session's last ``limit`` turns (working memory), oldest first."""
        ...

    def important(self, scope: Scope, threshold: float, limit: int) -> list[Message]:
        """Up to ``limit`` turns with importance ≥ ``threshold``, newest first."""
        ...

    def similar(
        self, scope: Scope, query: str, threshold: float, limit: int
    ) -> list[tuple[Message, float]]:
        """Up to ``limit`` turns with cosine to ``query`` > ``threshold``, best first."""
        ...

    def similar_scores(
        self, scope: Scope, query: Query, threshold: float, limit: int, *, keys: bool = False
    ) -> list[tuple[str, float]]:
        """Like :meth:`similar`, ids and cosines only (no rows read); ``keys``: scored by
        the turns' contextual keys (see :mod:`store.read.neighbourhoods`)."""
        ...

    def lexical(self, scope: Scope, query: str, limit: int) -> list[tuple[Message, float]]:
        """Up to ``limit`` turns matching the query's words, best BM25 score first."""
        ...

    def lexical_scores(self, scope: Scope, query: str, limit: int,
                       leave_out: Collection[str] = ()) -> list[tuple[str, float]]:
        """Ids and BM25 scores of up to ``limit`` turns matching the query, best first
        (``leave_out``: case-folded words not searched, unless the query has no others)."""
        ...

    def lexical_waiting(
        self, scope: Scope, query: str, limit: int
    ) -> list[tuple[Message, float]]:
        """Up to ``limit`` turns without a vector yet that match the query, best first."""
        ...

    def waiting_for_vectors(self, scope: Scope) -> int:
        """How many turns of the scope have no vector yet (embedding is behind)."""
        ...

    def similarities(self, scope: Scope, query: Query, ids: Iterable[str],
                     *, keys: bool = False) -> dict[str, float]:
        """Cosine of the query to each of ``ids`` that has a vector."""
        ...

    def query_vector(self, query: str) -> np.ndarray:
        """The query's unit vector."""
        ...

    def vectors(self, scope: Scope, ids: Sequence[str], *, turned: bool = False
                ) -> Mapping[str, np.ndarray]:
        """The stored unit vector of each of ``ids`` that has one; ``turned``: all in one
        basis of the store's choosing, good for their dot products with each other only."""
        ...

    def messages(self, ids: list[str]) -> list[Message]:
        """The committed turns with these ids (any order; unknown ids are left out)."""
        ...

    def semantic_moments(self, scope: Scope, query: Query,
                         *, keys: bool = False) -> tuple[float, float] | None:
        """Mean and standard deviation of the query's cosine over the scope's turns."""
        ...

    def following(self, scope: Scope, ids: Iterable[str]) -> dict[str, Message]:
        """The turn right after each of ``ids`` in its own session (id -> next turn)."""
        ...

    def rerank_scores(self, query: str, texts: Sequence[str]) -> list[float] | None:
        """A cross-encoder's score of each (query, text); None when there is none."""
        ...

    def best_among(self, scope: Scope, query: Query, ids: Sequence[str], limit: int,
                   *, keys: bool = False) -> list[tuple[str, float]]:
        """Ids and cosines of the ``limit`` of ``ids`` nearest the query, best first."""
        ...

    def named_turns(self, scope: Scope, query: str, limit: int) -> Named | None:
        """Whom ``query`` names that sessions of the scope name too, and up to ``limit``
        turns of those sessions, newest first; None when no session names them."""
        ...

    def naming(self, scope: Scope, query: str, ids: Sequence[str],
               sessions: Collection[str] | None = None) -> set[str]:
        """Those of ``ids`` whose session names someone ``query`` names (see
        :mod:`store.read.names`); empty when it names no one a session of the scope does.
        ``sessions``: those sessions, when already known (:attr:`Named.sessions`)."""
        ...


class Strategy(Protocol):
    @property
    def name(self) -> str: ...

    def find(self, sources: Sources, scope: Scope, query: str | None) -> list[Hit]: ...


@dataclass(frozen=True)
class Recency:
    """The last ``limit`` turns; score = position counted from the newest (1 = newest)."""

    limit: int
    name: str = "recency"

    def find(self, sources: Sources, scope: Scope, query: str | None) -> list[Hit]:
        turns = sources.recent(scope.session_id, self.limit)
        return [Hit(m, float(len(turns) - i)) for i, m in enumerate(turns)]


@dataclass(frozen=True)
class Importance:
    """Turns with importance at least ``threshold`` (inclusive), newest first; score = it."""

    threshold: float
    limit: int
    name: str = "importance"

    def find(self, sources: Sources, scope: Scope, query: str | None) -> list[Hit]:
        if self.limit <= 0:
            return []
        found = sources.important(scope, self.threshold, self.limit)
        return [Hit(m, m.importance) for m in found]


@dataclass(frozen=True)
class Semantic:
    """Turns whose cosine to the query is greater than ``threshold`` (strict), best first."""

    threshold: float
    limit: int
    name: str = "semantic"

    def find(self, sources: Sources, scope: Scope, query: str | None) -> list[Hit]:
        if query is None or self.limit <= 0:
            return []
        found = sources.similar(scope, query, self.threshold, self.limit)
        return [Hit(m, score) for m, score in found]


@dataclass(frozen=True)
class Lexical:
    """Turns matching the query's words (FTS5, BM25), best first; score = BM25."""

    limit: int
    name: str = "lexical"

    def find(self, sources: Sources, scope: Scope, query: str | None) -> list[Hit]:
        if query is None or self.limit <= 0:
            return []
        return [Hit(m, score) for m, score in sources.lexical(scope, query, self.limit)]


@dataclass(frozen=True)
class LexicalWhileBehind:
    """While embedding is behind, the turns without a vector that match the query's words
    (BM25, best first): the semantic branch cannot see them. Nothing once all are embedded.
    """

    limit: int
    name: str = "lexical"

    def find(self, sources: Sources, scope: Scope, query: str | None) -> list[Hit]:
        if query is None or self.limit <= 0:
            return []
        found = sources.lexical_waiting(scope, query, self.limit)
        return [Hit(m, score) for m, score in found]


SEMANTIC_BRANCHES = frozenset({"semantic", "relevance"})
"""Branches that search by meaning, and so see only turns that have a vector."""


LEXICAL_EVIDENCE = 1000
"""Lexical matches read per query: the candidates, and the BM25 of semantic candidates
that are not among them (FTS5 scores every match to sort them anyway)."""


DISTINCT_HEAD = 3
"""Candidates looked at for near-copies, per item wanted: what is left fills the budget."""


@dataclass(frozen=True)
class Relevance:
    """Lexical and calibrated semantic evidence fused, plus the turn after each match.

    Each kind of evidence gives up to ``candidates`` turns (semantic ones at least
    ``min_z`` standard deviations above the session's mean cosine); the successors of
    the best ``limit`` are looked up, and the best ``limit`` turns are returned, best
    first. Scores and rules: :mod:`producers.ranking.fusion`. With ``contextual``, the semantic
    evidence is the query's score against each turn's contextual key (the turn mixed with
    its neighbours, :mod:`store.read.neighbourhoods`) rather than the turn alone. With
    ``feedback``, a second semantic round asks again from the best first matches.
    """

    limit: int
    candidates: int
    lexical_weight: float
    min_z: float
    neighbour_share: float
    contextual: bool = False
    rerank: int = 0
    """How many of the best fused turns a cross-encoder orders, if there is one."""
    feedback: float = 0.0
    """How far the feedback round moves the query towards its best first matches (0: no
    second round)."""
    feedback_turns: int = 2
    """How many of the first round's best turns the feedback round moves towards."""
    duplicate_cosine: float = 1.0
    """A candidate whose vector is at least this near a better one's is left out."""
    name_penalty: float = 0.0
    """The share of its score a candidate loses when the question names someone its
    session does not and other sessions do (rule 6 of :mod:`producers.ranking.fusion`)."""
    named_turns: int = 0
    """With a ``name_penalty``, how many turns of the sessions that name whom the question
    names are searched as a scope of their own (rule 7); 0: none."""
    name: str = "relevance"

    def find(self, sources: Sources, scope: Scope, query: str | None) -> list[Hit]:
        if query is None or self.limit <= 0:
            return []
        ranked = self._fused(sources, scope, query)
        turns: dict[str, Message] = {}
        if self.neighbour_share > 0:
            after = sources.following(scope, [c.id for c in ranked[: self.limit]])
            turns = {m.id: m for m in after.values()}
            following = {mid: m.id for mid, m in after.items()}
            ranked = fusion.with_neighbours(ranked, following, self.neighbour_share)
        ranked = self._distinct(sources, scope, ranked)  # a neighbour may be a copy too
        if self.rerank > 0:
            ranked = self._reranked(sources, query, ranked, turns)
        best = ranked[: self.limit]
        turns.update((m.id, m) for m in sources.messages([c.id for c in best
                                                           if c.id not in turns]))
        return [Hit(turns[c.id], c.fused, c.scores(), c.branches, c.neighbour_of)
                for c in best if c.id in turns]  # (a turn deleted meanwhile is skipped)

    def _distinct(self, sources: Sources, scope: Scope, ranked: list[fusion.Candidate]
                  ) -> list[fusion.Candidate]:
        """The best candidates without their near-copies (rule 5 of
        :mod:`producers.ranking.fusion`); enough of them to fill ``limit`` after."""
        head = ranked[: DISTINCT_HEAD * self.limit]
        vectors = sources.vectors(scope, [c.id for c in head], turned=True)
        return fusion.distinct(head, vectors, self.duplicate_cosine) + ranked[len(head):]

    def _reranked(self, sources: Sources, query: str, ranked: list[fusion.Candidate],
                  turns: dict[str, Message]) -> list[fusion.Candidate]:
        """The best ``rerank`` candidates in the cross-encoder's order, then the rest."""
        top, rest = ranked[: self.rerank], ranked[self.rerank:]
        turns.update((m.id, m) for m in sources.messages([c.id for c in top
                                                           if c.id not in turns]))
        top = [c for c in top if c.id in turns]
        scores = sources.rerank_scores(query, [turns[c.id].content for c in top])
        if scores is None:
            return ranked
        scored = [replace(c, rerank=s) for c, s in zip(top, scores, strict=True)]
        return sorted(scored, key=lambda c: (-(c.rerank or 0.0), c.id)) + rest

    def _fused(self, sources: Sources, scope: Scope, query: str) -> list[fusion.Candidate]:
        """The candidates of both kinds, each with all the evidence there is for it; with
        ``feedback``, the better of two rounds (rule 4 of :mod:`producers.ranking.fusion`)."""
        named = self._named_scope(sources, scope, query)
        leave_out = named.words if named else ()
        bm25 = alongside.start(lambda: sources.lexical_scores(scope, query, LEXICAL_EVIDENCE,
                                                              leave_out))
        first = self._round(sources, scope, bm25, query, named)
        if self.feedback > 0 and first:
            found = sources.vectors(scope, [c.id for c in first[: self.feedback_turns]])
            moved = fusion.feedback_query(sources.query_vector(query),
                                          np.array(list(found.values())), self.feedback)
            if moved is not None:  # the named scope's best are the first round's already
                first = fusion.best_of(first, self._round(sources, scope, bm25, moved, None))
        return self._named(sources, scope, query, first, named)

    def _named_scope(self, sources: Sources, scope: Scope, query: str) -> Named | None:
        """Rule 7 of :mod:`producers.ranking.fusion`: whom the question names that some
        sessions name, and their turns; None where the rule does not apply."""
        if self.named_turns <= 0 or self.name_penalty <= 0 or scope.kind == "session":
            return None
        return sources.named_turns(scope, query, self.named_turns)

    def _round(self, sources: Sources, scope: Scope, lexical: Future[list[tuple[str, float]]],
               query: Query, named: Named | None) -> list[fusion.Candidate]:
        """One round: the lexical matches (searched meanwhile) and the turns near
        ``query``, fused; with ``named``, the best of its turns by each kind too."""
        keys = self.contextual
        moments = sources.semantic_moments(scope, query, keys=keys)
        cosine: dict[str, float] = {}
        if moments is not None:
            threshold = moments[0] + self.min_z * moments[1]
            cosine = dict(sources.similar_scores(scope, query, threshold, self.candidates,
                                                 keys=keys))
            if named is not None:
                cosine.update(sources.best_among(scope, query, named.turns, self.candidates,
                                                 keys=keys))
        bm25 = lexical.result()
        lexical_only = [mid for mid, _ in bm25[: self.candidates] if mid not in cosine]
        if named is not None:
            lexical_only += fusion.among(bm25, named.turns, self.candidates,
                                         taken={*cosine, *lexical_only})
        candidates = [*cosine, *lexical_only]
        cosine.update(sources.similarities(scope, query, lexical_only, keys=keys))
        return fusion.fuse(candidates, dict(bm25), cosine, moments,
                           self.lexical_weight, self.min_z)

    def _named(self, sources: Sources, scope: Scope, query: str,
               ranked: list[fusion.Candidate], named: Named | None) -> list[fusion.Candidate]:
        """Rule 6 of :mod:`producers.ranking.fusion`: the candidates of sessions that name no
        one ``query`` names lose a share, when others do; not within one session, where
        every turn names alike. The named scope (``named``) knows those sessions already."""
        if self.name_penalty <= 0 or scope.kind == "session" or not ranked:
            return ranked
        naming = sources.naming(scope, query, [c.id for c in ranked],
                                named.sessions if named else None)
        return fusion.named(ranked, naming, self.name_penalty)


@dataclass
class Found:
    """One message of the combined result: the branches that found it and their scores."""

    message: Message
    scores: dict[str, float] = field(default_factory=dict)
    branches: list[str] = field(default_factory=list)
    neighbour_of: str | None = None

    def add(self, branch: str, hit: Hit) -> None:
        """Record ``branch``'s hit; the first score under each name is kept."""
        for name in hit.branches or (branch,):
            if name not in self.branches:
                self.branches.append(name)
        for name, score in (hit.details or {branch: hit.score}).items():
            self.scores.setdefault(name, score)
        self.neighbour_of = self.neighbour_of or hit.neighbour_of


BranchHits = Sequence[tuple[str, list[Hit]]]
Combiner = Callable[[BranchHits], list[Found]]


def union(results: BranchHits) -> list[Found]:
    """Everything any branch found, once per message id, oldest first.

    Branch scores are kept in the profile's order of branches.
    """
    found: dict[str, Found] = {}
    for branch, hits in results:
        for hit in hits:
            found.setdefault(hit.message.id, Found(hit.message)).add(branch, hit)
    return sorted(found.values(), key=lambda f: chronological_key(f.message))


def budgeted(limit: int) -> Combiner:
    """Like :func:`union`, but at most ``limit`` messages: earlier branches first, each
    branch's hits in its order, a message found again costing nothing."""

    def combine(results: BranchHits) -> list[Found]:
        found: dict[str, Found] = {}
        for branch, hits in results:
            for hit in hits:
                item = found.get(hit.message.id)
                if item is None and len(found) >= limit:
                    continue
                if item is None:
                    item = found[hit.message.id] = Found(hit.message)
                item.add(branch, hit)
        return sorted(found.values(), key=lambda f: chronological_key(f.message))

    return combine


@dataclass(frozen=True)
class Profile:
    name: str
    strategies: tuple[Strategy, ...]
    combine: Combiner = union

    @property
    def contextual(self) -> bool:
        """Whether a branch reads the turns' contextual keys (the cache must hold them)."""
        return any(getattr(s, "contextual", False) for s in self.strategies)

    @property
    def searches_meaning(self) -> bool:
        """Whether a branch searches by meaning (and is partial while embedding is behind)."""
        return any(s.name in SEMANTIC_BRANCHES for s in self.strategies)


def tri_hybrid(config: RetrievalConfig) -> Profile:
    return Profile(
        "tri-hybrid",
        (
            Recency(config.recency_limit),
            Importance(config.importance_threshold, config.importance_limit),
            Semantic(config.semantic_threshold, config.semantic_limit),
            LexicalWhileBehind(config.semantic_limit),
        ),
    )


def recall(config: RetrievalConfig) -> Profile:
    budget = config.recall_budget
    return Profile(
        "recall",
        (
            Recency(min(config.recall_recency_limit, budget)),
            Importance(config.importance_threshold, config.recall_importance_limit),
            Relevance(budget, config.recall_candidates, config.recall_lexical_weight,
                      config.recall_min_z, config.recall_neighbour_share,
                      contextual=config.recall_context_weight > 0,
                      rerank=config.reranker_candidates if config.reranker_dir else 0,
                      feedback=config.recall_feedback,
                      feedback_turns=config.recall_feedback_turns,
                      duplicate_cosine=config.recall_duplicate_cosine,
                      name_penalty=config.recall_name_penalty,
                      named_turns=config.recall_named_turns),
        ),
        budgeted(budget),
    )


PROFILES: dict[str, Callable[[RetrievalConfig], Profile]] = {
    "tri-hybrid": tri_hybrid, "recall": recall,
}
"""Profile name -> builder from the ``[retrieval]`` settings."""


def profile_for(config: RetrievalConfig) -> Profile:
    builder = PROFILES.get(config.profile)
    if builder is None:
        known = ", ".join(sorted(PROFILES))
        raise ConfigError(f"[retrieval] profile {config.profile!r} is unknown (known: {known})")
    return builder(config)
