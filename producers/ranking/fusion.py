"""How the ``recall`` profile weighs lexical and semantic evidence, and neighbouring turns.

Pure functions on what the branches found; no reads here. Seven rules, each measured on
the development conversations (bench/retrieval.py), the last three on one user's long
history too (bench/context.py --realistic):

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
4. *Feedback.* A question's evidence is often several turns about one thing, and the
   best first matches say more about that thing than the question's words: a second
   semantic round asks with the query's vector moved towards the mean of the best few
   candidates' vectors (``feedback`` times that unit mean, added, then normalised), and
   each turn keeps the better of its two fused scores (:func:`best_of`).
5. *Distinct.* A candidate whose vector is within ``duplicate_cosine`` of a better one's is
   left out (:func:`distinct`): a history repeats itself (a retried call, the same tool
   output, the same words to someone else), and each near-copy would take a place of the
   budget that something else could use. The better of the copies, by rules 1-4, stays:
   the one whose words match the question's (a name, say) when the others do not.
6. *Named.* When a question names someone (or something) and some sessions of the scope
   name them too, the candidates of the other sessions keep ``1 - name_penalty`` of
   their score (:func:`named`): many conversations of a user look alike, and the one
   with the person asked about is the one to answer from. The session decides, not the
   turn: an answer to Caroline need not say "Caroline" (store/read/names.py).
7. *Named scope.* In a long history a named person is a rare word, and BM25 lifts every
   turn that names them above the turns whose own words answer the question (at 100,119
   turns, 14 of the 21 evidence turns lost against 5,141 were lost so). So, where rule 6
   applies and the sessions that name them hold less than half of the scope, the names
   are left out of the lexical search, and the newest ``named_turns`` turns of those
   sessions are searched as a scope of their own in the first round: their best
   ``candidates`` by meaning and by words (:func:`among`) join the candidates, and rule 6
   decides between them and the rest. Where they hold most of the scope (one
   conversation with the person asked about), the name says whose turn answers, and the
   lexical search keeps it (the development folds lost 0.021 without it).
"""

from __future__ import annotations

import itertools
from collections.abc import Collection, Iterable, Mapping, Sequence
from dataclasses import dataclass, replace

import numpy as np


@dataclass(frozen=True)
class Candidate:
    """One turn (by id) and the evidence for it; ``fused`` is what it is ranked by."""

    id: str
    lexical: float | None = None
    """BM25 score (larger is better), if the turn matches the query's words."""
    similarity: float | None = None
    """Cosine to the query, if the turn has a vector."""
    z: float | None = None
    """Standard deviations of the cosine above the session's mean, if enough to count."""
    own: float = 0.0
    """Fused score of its own evidence, in [0, 1]."""
    inherited: float = 0.0
    """Share of the previous turn's ``own`` score."""
    neighbour_of: str | None = None
    """The turn it inherited from, when that counts."""
    rerank: float | None = None
    """The cross-encoder's score, when one re-scored the turn (see memq/reranker.py)."""
    feedback: bool = False
    """Whether its score is the feedback round's (rule 4), better than the first's."""
    name_penalty: float | None = None
    """The share of its score it lost to rule 6 (its session names no one asked about)."""

    @property
    def fused(self) -> float:
        return max(self.own, self.inherited)

    @property
    def branches(self) -> tuple[str, ...]:
        found = ("lexical",) * (self.lexical is not None) + ("semantic",) * (self.z is not None)
        return (found + ("feedback",) * self.feedback
                + ("neighbour",) * (self.neighbour_of is not None))

    def scores(self) -> dict[str, float]:
        """Named scores for the item's explanation."""
        named = {"lexical": self.lexical, "semantic": self.similarity, "semantic_z": self.z,
                 "neighbour": self.inherited if self.neighbour_of else None,
                 "fused": self.fused, "rerank": self.rerank,
                 "name_penalty": self.name_penalty}
        return {name: value for name, value in named.items() if value is not None}


def fuse(
    ids: Iterable[str],
    bm25: Mapping[str, float],
    cosine: Mapping[str, float],
    moments: tuple[float, float] | None,
    lexical_weight: float,
    min_z: float,
) -> list[Candidate]:
    """Score each turn of ``ids``; best ``own`` score first (ties: the later id first).

    ``bm25`` holds the query's lexical matches in the session (id -> BM25; its best is
    the best match of all), ``cosine`` the candidates' cosine to the query, ``moments``
    the mean and standard deviation of the query's cosine over the session (None: no
    semantic evidence can be calibrated, so none is used). A cosine counts as evidence
    if its z is at least ``min_z``.
    """
    zs = _z_scores(cosine, moments, min_z)
    best_bm25 = max(bm25.values(), default=0.0)
    best_z = max(zs.values(), default=0.0)
    found = []
    for mid in ids:
        lexical, z = bm25.get(mid), zs.get(mid)
        lexical_share = lexical / best_bm25 if lexical is not None and best_bm25 > 0 else 0.0
        semantic_share = max(z, 0.0) / best_z if z is not None and best_z > 0 else 0.0
        own = lexical_weight * lexical_share + (1 - lexical_weight) * semantic_share
        found.append(Candidate(mid, lexical, cosine.get(mid), z, own))
    return _ranked(found)


def feedback_query(query: np.ndarray, found: np.ndarray, weight: float) -> np.ndarray | None:
    """The query moved towards the unit mean of ``found`` (rows) by ``weight``, as a unit
    vector; None when there is nothing to move towards, or nothing left of the query."""
    if len(found) == 0:
        return None
    mean = np.asarray(found, dtype=np.float64).mean(axis=0)
    norm = float(np.linalg.norm(mean))
    if norm < 1e-9:
        return None
    moved = np.asarray(query, dtype=np.float64) + weight * mean / norm
    length = float(np.linalg.norm(moved))
    if length < 1e-9:  # the hits point exactly away from the query, as far as it goes
        return None
    return np.asarray(moved / length, dtype=np.float32)


def best_of(first: Iterable[Candidate], second: Iterable[Candidate]) -> list[Candidate]:
    """Each turn of either round with its better ``own`` score (a tie keeps the first's);
    those the second round scored better are marked ``feedback``."""
    best = {c.id: c for c in first}
    for candidate in second:
        kept = best.get(candidate.id)
        if kept is None or candidate.own > kept.own:
            best[candidate.id] = replace(candidate, feedback=True)
    return _ranked(best.values())


COPY_SLACK = 1e-4
"""Rounding of the stored vectors (int8 blocks, store/read/vector_index.py): two copies of
one text score 0.9999 as well as 1 with each other, and are copies all the same."""


def distinct(ranked: Sequence[Candidate], vectors: Mapping[str, np.ndarray],
             cosine: float) -> list[Candidate]:
    """``ranked`` without each candidate whose vector has a dot product of at least
    ``cosine`` with that of a better candidate kept; one without a vector always stays."""
    with_vector = [c.id for c in ranked if c.id in vectors]
    if len(with_vector) < 2:
        return list(ranked)
    row = {mid: n for n, mid in enumerate(with_vector)}
    matrix = np.array([vectors[mid] for mid in with_vector], dtype=np.float64)
    near = matrix @ matrix.T >= cosine - COPY_SLACK
    kept_rows: list[int] = []
    kept = []
    for candidate in ranked:
        at = row.get(candidate.id)
        if at is not None:
            if near[at, kept_rows].any():
                continue
            kept_rows.append(at)
        kept.append(candidate)
    return kept


def among(ranked: Iterable[tuple[str, float]], members: Collection[str], limit: int,
          taken: Collection[str]) -> list[str]:
    """The ids of the first ``limit`` of ``ranked`` (id, score; best first) that are
    ``members`` and not ``taken``."""
    wanted = set(members)
    found = (mid for mid, _ in ranked if mid in wanted and mid not in taken)
    return list(itertools.islice(found, limit))


def named(ranked: Iterable[Candidate], naming: Collection[str], penalty: float
          ) -> list[Candidate]:
    """``ranked`` (best first) with the ``own`` score of each candidate not in ``naming``
    scaled by ``1 - penalty``, best first again; unchanged when ``naming`` is empty (no
    session names anyone asked about, and scaling every score alike would change nothing
    but the figures)."""
    if not naming or penalty <= 0:
        return list(ranked)
    keep = 1.0 - penalty
    scaled = [c if c.id in naming else replace(c, own=c.own * keep, name_penalty=penalty)
              for c in ranked]
    # A stable sort: scores a product made equal (a penalty of 1) keep the order they had.
    return sorted(scaled, key=lambda c: -c.fused)


def _z_scores(cosine: Mapping[str, float], moments: tuple[float, float] | None,
              min_z: float) -> dict[str, float]:
    """id -> z of each cosine that counts; none without a spread to calibrate by."""
    if moments is None or not moments[1] > 1e-9:
        return {}  # no vectors, or all alike: a z would be noise
    mean, spread = moments
    zs = {mid: (value - mean) / spread for mid, value in cosine.items()}
    return {mid: z for mid, z in zs.items() if z >= min_z}


def with_neighbours(
    ranked: Iterable[Candidate], following: Mapping[str, str], share: float
) -> list[Candidate]:
    """Add what each candidate's next turn (``following``: id -> next id) inherits.

    A turn that is a candidate already keeps its evidence and gains the inheritance only
    if that is larger than its own score; from several predecessors, the largest counts.
    """
    ranked = list(ranked)
    found = {c.id: c for c in ranked}
    for candidate in ranked:
        after = following.get(candidate.id)
        inherited = share * candidate.own
        if after is None or inherited <= 0.0:
            continue
        current = found.get(after, Candidate(after))
        if inherited > max(current.own, current.inherited):
            found[after] = replace(current, inherited=inherited, neighbour_of=candidate.id)
    return _ranked(found.values())


def _ranked(candidates: Iterable[Candidate]) -> list[Candidate]:
    return sorted(candidates, key=lambda c: (c.fused, c.id), reverse=True)
