"""Retrieval branches and the profiles that combine them for ``get_context``.

A *strategy* (a branch) finds messages of a session by one criterion and scores each;
a *profile* is an ordered list of strategies, with their limits and thresholds, plus the
function that combines what they found. ``[retrieval] profile`` names the profile:

    tri-hybrid   recency (last N turns of working memory)
               + importance (importance ≥ threshold, newest first)
               + semantic (cosine to the query > threshold, best first)

Strategies read through :class:`Sources` (the client implements it), so a new branch —
a lexical one, say — is a class with ``name`` and ``find``, and a new profile is one
entry in :data:`PROFILES`.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Protocol

from memq.config import RetrievalConfig
from memq.errors import ConfigError
from producers.messages import Message, chronological_key


@dataclass(frozen=True)
class Hit:
    """A message one branch found, with that branch's score for it."""

    message: Message
    score: float


class Sources(Protocol):
    """What strategies may read; every method takes an already validated session id."""

    def recent(self, session_id: str, limit: int) -> list[Message]:
        """The last ``limit`` turns (working memory), oldest first."""
        ...

    def important(self, session_id: str, threshold: float, limit: int) -> list[Message]:
        """Up to ``limit`` turns with importance ≥ ``threshold``, newest first."""
        ...

    def similar(
        self, session_id: str, query: str, threshold: float, limit: int
    ) -> list[tuple[Message, float]]:
        """Up to ``limit`` turns with cosine to ``query`` > ``threshold``, best first."""
        ...


class Strategy(Protocol):
    @property
    def name(self) -> str: ...

    def find(self, sources: Sources, session_id: str, query: str | None) -> list[Hit]: ...


@dataclass(frozen=True)
class Recency:
    """The last ``limit`` turns; score = position counted from the newest (1 = newest)."""

    limit: int
    name: str = "recency"

    def find(self, sources: Sources, session_id: str, query: str | None) -> list[Hit]:
        turns = sources.recent(session_id, self.limit)
        return [Hit(m, float(len(turns) - i)) for i, m in enumerate(turns)]


@dataclass(frozen=True)
class Importance:
    """Turns with importance at least ``threshold`` (inclusive), newest first; score = it."""

    threshold: float
    limit: int
    name: str = "importance"

    def find(self, sources: Sources, session_id: str, query: str | None) -> list[Hit]:
        if self.limit <= 0:
            return []
        found = sources.important(session_id, self.threshold, self.limit)
        return [Hit(m, m.importance) for m in found]


@dataclass(frozen=True)
class Semantic:
    """Turns whose cosine to the query is greater than ``threshold`` (strict), best first."""

    threshold: float
    limit: int
    name: str = "semantic"

    def find(self, sources: Sources, session_id: str, query: str | None) -> list[Hit]:
        if query is None or self.limit <= 0:
            return []
        found = sources.similar(session_id, query, self.threshold, self.limit)
        return [Hit(m, score) for m, score in found]


@dataclass(frozen=True)
class Found:
    """One message of the combined result and the score each branch that found it gave."""

    message: Message
    scores: dict[str, float] = field(default_factory=dict)


BranchHits = Sequence[tuple[str, list[Hit]]]
Combiner = Callable[[BranchHits], list[Found]]


def union(results: BranchHits) -> list[Found]:
    """Everything any branch found, once per message id, oldest first.

    Branch scores are kept in the profile's order of branches.
    """
    found: dict[str, Found] = {}
    for branch, hits in results:
        for hit in hits:
            item = found.setdefault(hit.message.id, Found(hit.message))
            item.scores.setdefault(branch, hit.score)
    return sorted(found.values(), key=lambda f: chronological_key(f.message))


@dataclass(frozen=True)
class Profile:
    name: str
    strategies: tuple[Strategy, ...]
    combine: Combiner = union


def tri_hybrid(config: RetrievalConfig) -> Profile:
    return Profile(
        "tri-hybrid",
        (
            Recency(config.recency_limit),
            Importance(config.importance_threshold, config.importance_limit),
            Semantic(config.semantic_threshold, config.semantic_limit),
        ),
    )


PROFILES: dict[str, Callable[[RetrievalConfig], Profile]] = {"tri-hybrid": tri_hybrid}
"""Profile name -> builder from the ``[retrieval]`` settings."""


def profile_for(config: RetrievalConfig) -> Profile:
    builder = PROFILES.get(config.profile)
    if builder is None:
        known = ", ".join(sorted(PROFILES))
        raise ConfigError(f"[retrieval] profile {config.profile!r} is unknown (known: {known})")
    return builder(config)
