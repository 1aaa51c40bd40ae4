"""How the ``recall`` profile weighs lexical and semantic evidence, and neighbouring turns.

Pure functions on what the branches found; no reads here. Three rules, each measured on
the development conversations (bench/retrieval.py):

1. *Calibrated similarity.* A raw cosine means different things for different queries
   (with all-MiniLM-L6-v2 most relevant turns score 0.4-0.6, and a fixed cut at 0.65
   loses nine in ten), so a turn's semantic evidence is its ``z``: how many standard
   deviations its cosine lies above the session's mean cosine for this query.
2. *Fusion.* Each branch's evidence is divided by the best of that branch for this
   query, and the two are mixed with ``lexical_weight`` (BM25 / best BM25) and
   ``1 - lexical_weight`` (z / best z), so both lie in [0, 1] and neither branch's scale
   dominates; a turn only one branch found gets only that branch's share.
3. *Neighbours.* An answer often comes one turn after the turn that matches the question
   (the question repeats the asker's words), so the turn after each candidate inherits
   ``neighbour_share`` of that candidate's fused score, and keeps the larger of what it
   inherits and its own.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, replace

from producers.messages import Message


@dataclass(frozen=True)
class Candidate:
    """One turn and the evidence for it; ``fused`` is what it is ranked by."""

    message: Message
    lexical: float | None = None
    """BM25 score (larger is better), if the lexical branch found it."""
    similarity: float | None = None
    """Cosine to the query, if the semantic branch found it."""
    z: float | None = None
    """Standard deviations of the cosine above the session's mean, if found semantically."""
    own: float = 0.0
    """Fused score of its own evidence, in [0, 1]."""
    inherited: float = 0.0
    """Share of the previous turn's ``own`` score."""
    neighbour_of: str | None = None
    """The turn it inherited from, when that counts."""

    @property
    def fused(self) -> float:
        return max(self.own, self.inherited)

    @property
    def branches(self) -> tuple[str, ...]:
        found = ("lexical",) * (self.lexical is not None) + ("semantic",) * (self.z is not None)
        return found + ("neighbour",) * (self.neighbour_of is not None)

    def scores(self) -> dict[str, float]:
        """Named scores for the item's explanation."""
        named = {"lexical": self.lexical, "semantic": self.similarity, "semantic_z": self.z,
                 "neighbour": self.inherited if self.neighbour_of else None,
                 "fused": self.fused}
        return {name: value for name, value in named.items() if value is not None}


def fuse(
    lexical: Sequence[tuple[Message, float]],
    semantic: Sequence[tuple[Message, float]],
    moments: tuple[float, float] | None,
    lexical_weight: float,
) -> list[Candidate]:
    """Every turn either branch found, best ``own`` score first (ties: newer first).

    ``lexical`` holds (turn, BM25), ``semantic`` (turn, cosine); ``moments`` is the mean
    and standard deviation of the query's cosine over the session (None: no semantic
    evidence can be calibrated, so it is not used).
    """
    found: dict[str, Candidate] = {}
    best = max((score for _, score in lexical), default=0.0)
    for message, score in lexical:
        share = score / best if best > 0 else 0.0
        found[message.id] = Candidate(message, lexical=score, own=lexical_weight * share)
    for message, similarity, z, share in _calibrated(semantic, moments):
        seen = found.get(message.id, Candidate(message))
        found[message.id] = replace(seen, similarity=similarity, z=z,
                                    own=seen.own + (1 - lexical_weight) * share)
    return _ranked(found.values())


def _calibrated(
    semantic: Sequence[tuple[Message, float]], moments: tuple[float, float] | None
) -> list[tuple[Message, float, float, float]]:
    """(turn, cosine, z, z / best z) for each semantic hit; nothing without a spread."""
    if moments is None or not moments[1] > 1e-9:
        return []  # no vectors, or all alike: a z would be noise
    mean, spread = moments
    zs = [(message, cosine, (cosine - mean) / spread) for message, cosine in semantic]
    best = max((z for _, _, z in zs), default=0.0)
    return [(m, cosine, z, max(z, 0.0) / best if best > 0 else 0.0) for m, cosine, z in zs]


def with_neighbours(
    ranked: Sequence[Candidate], following: Mapping[str, Message], share: float
) -> list[Candidate]:
    """Add what each candidate's next turn (``following``: id -> next turn) inherits.

    A turn that is a candidate already keeps its evidence and gains the inheritance only
    if that is larger than its own score; from several predecessors, the largest counts.
    """
    found = {c.message.id: c for c in ranked}
    for candidate in ranked:
        after = following.get(candidate.message.id)
        inherited = share * candidate.own
        if after is None or inherited <= 0.0:
            continue
        current = found.get(after.id, Candidate(after))
        if inherited > max(current.own, current.inherited):
            found[after.id] = replace(current, inherited=inherited,
                                      neighbour_of=candidate.message.id)
    return _ranked(found.values())


def _ranked(candidates: Iterable[Candidate]) -> list[Candidate]:
    items = list(candidates)
    items.sort(key=lambda c: (c.message.created_at, c.message.id), reverse=True)
    items.sort(key=lambda c: c.fused, reverse=True)
    return items
