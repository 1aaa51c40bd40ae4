"""Neighbourhood keys: each turn also searched by the turns around it.

A question often matches a turn only together with its neighbours (the question names
what one turn asked, the answer is in the next; a pronoun in a turn points at a noun in
the one before). Each turn therefore gets a second, *contextual* key vector::

    key(i) = (1 - w) * v(i) + w * unit(v(i-1) + v(i) + v(i+1))

where ``v`` are the stored unit vectors of the turns of the same session in order (by
``seq``) and ``w`` the weight of the neighbourhood. The dot product of a query with the
key is the mix of its cosine to the turn and to the turn's neighbourhood; the turn itself
is what a search returns. Keys are derived from the stored vectors when the vector cache
reads them, never stored: forgetting a turn forgets its key, and the keys of its
neighbours are computed again without it.

Measured at user scope on the development conversations (bench/retrieval.py, recall
profile): 0.777 of the evidence within 20 items without keys, 0.793 with them (held-out
folds 0.764 -> 0.777). In a simulation of the same profile, keys embedded from text (the
turn, its neighbours and its session's date) found 0.799: not worth a second embedding of
every turn, its storage and its erasure.

Cost: a second index beside the vectors of each scope the recall profile searches. Once
a scope has :data:`PROJECT_FROM` turns, that index keeps each key's first
:data:`KEPT_DIMS` coordinates along the keys' principal axes (94% of their energy on real
turns), 240 bytes a key instead of 496, and only finds candidates:
:data:`CANDIDATES_PER_RESULT` for each key asked for, among the :data:`LEADERS` keys that
lead on the index's first block, whose exact scores are then computed from the turns' own
vectors (which are never held a second time). On 100,119 real turns
(bench/context.py --realistic) the candidates held 0.994 of the exact best 50 (0.987 since
they come from the leaders, the end recall unchanged). On a
scope's first load, keys for 100,000 turns in ~1.9 s against ~0.9 s for the vectors alone
(measured on this 2-core machine under load), and once more as they are projected (the
first call at 100,119 turns: 6.0 s, 4.7 s with full keys).
"""

from __future__ import annotations

import bisect
from collections.abc import Callable, Iterable, Sequence
from typing import NamedTuple

import numpy as np

from memq.store.read.vector_index import FIT_SAMPLE, REFIT_GROWTH, VectorIndex, principal_axes

PROJECT_FROM = 32_768
"""Keys a scope needs before its index keeps them projected. Below, full keys take at most
16 MiB and answer sooner (get_context at 5,141 real turns: 9.7 / 13.2 ms p50 / p95 with
full keys, 12.2 / 14.6 projected; at 100,119 the same either way)."""

KEPT_DIMS = 128
"""Coordinates of a projected key. Of the exact best 50 keys on 100,119 real turns, the
best 200 by 128 coordinates held 0.994 (400: 0.9996); by 96, 0.970 (0.993); by 64, 0.87."""

CANDIDATES_PER_RESULT = 4
"""Candidates a projected search scores exactly for each key asked for: 8 cost 6-8 ms
more a call at 100,119 turns for the same recall (bench/context.py --realistic)."""

LEADERS = 16_384
"""Projected keys a search scores whole: those that lead on the index's first block (its
32 leading coordinates, which it scans for every key anyway). The exact search of the
projected keys read the rest of 70% of them, its bound pruning little on real turns. On
100,119 real turns (bench/context.py --realistic, 200 questions): the keys' search finds
0.9873 of the exact best 50 (lowest 0.82) against 0.989-0.993 (0.84-0.90) with the exact
search of the projection, end recall 0.587 either way, get_context 47.6 / 64.9 ms against
51.5 / 69.1 in calls alternated in one process; finding the candidates alone 7.9 ms at p50
against 11.5 (the bench's `contextual keys:` line). 8,192: 0.971 (lowest 0.70), 46.7 /
58.1 against 55.0 / 70.0; 4,096: 0.941 (lowest 0.40)."""

PROJECT_CHUNK = 8192
"""Keys computed at a time when a scope's keys are projected (no (rows, dim) copy)."""

SAMPLE_GROWTH = 1.1
"""The keys :meth:`Neighbourhoods.moments` estimates from are taken again once the set has
grown by this factor (or a turn left it, or the turns' basis changed): taken again after
every new turn, they cost 30 ms of the call that followed it at 100,000 turns."""


class _Sample(NamedTuple):
    basis: np.ndarray | None
    """The turns' basis the keys are in."""
    size: int
    """Keys in the set when they were taken."""
    keys: np.ndarray


class _Order:
    """A session's turns in the order of (seq, id), as two lists side by side: a list of
    pairs held a tuple per turn (5 MB at 100,000 turns), and finding a turn compared pairs
    (a search finds the neighbours of ~600 turns)."""

    __slots__ = ("ids", "seqs", "session_id")

    def __init__(self, session_id: str) -> None:
        self.session_id = session_id
        self.seqs: list[int] = []
        self.ids: list[str] = []

    def __len__(self) -> int:
        return len(self.ids)

    def insert(self, seq: int, message_id: str) -> None:
        at = self._at(seq, message_id)
        self.seqs.insert(at, seq)
        self.ids.insert(at, message_id)

    def remove(self, seq: int, message_id: str) -> None:
        at = self._at(seq, message_id)
        del self.seqs[at], self.ids[at]

    def sides(self, seq: int, message_id: str) -> tuple[str | None, str | None]:
        """The turns before and after the turn (None: none)."""
        at, ids = self._at(seq, message_id), self.ids
        return (ids[at - 1] if at > 0 else None, ids[at + 1] if at + 1 < len(ids) else None)

    def _at(self, seq: int, message_id: str) -> int:
        """Where (seq, message_id) is, or would go."""
        seqs, at = self.seqs, bisect.bisect_left(self.seqs, seq)
        while at < len(seqs) and seqs[at] == seq and self.ids[at] < message_id:
            at += 1
        return at


class Neighbourhoods:
    """Contextual key vectors of a set of turns, kept up to date as turns come and go."""

    def __init__(self, turns: VectorIndex, weight: float) -> None:
        """``turns``: the index of the turns' own vectors, which its owner brings up to
        date before each :meth:`upsert` and :meth:`remove` (the keys read it)."""
        if not 0.0 < weight <= 1.0:
            raise ValueError(f"weight must be in (0, 1], got {weight}")
        self.weight = weight
        self.turns = turns
        self.index = VectorIndex(turns.dim)
        self._place: dict[str, tuple[_Order, int]] = {}
        """Each turn's session, as its order (not its id: a string a turn, ~65 bytes, where
        the order is shared by the session's turns), and its seq."""
        self._order: dict[str, _Order] = {}
        self._axes: np.ndarray | None = None
        """(dim, KEPT_DIMS): the keys' principal axes once projected; None: full keys."""
        self._projected_rows = 0
        self._sample: _Sample | None = None
        """Keys of evenly spaced turns, for :meth:`moments` while projected."""

    def __len__(self) -> int:
        return len(self._place)

    @property
    def nbytes(self) -> int:
        """The keys' arrays (the turns' vectors are their index's)."""
        extra = [a for a in (self._axes, self._sample and self._sample.keys) if a is not None]
        return self.index.nbytes + sum(int(a.nbytes) for a in extra)

    @property
    def projected(self) -> bool:
        return self._axes is not None

    # -- searching ----------------------------------------------------------------------

    def search(self, query: np.ndarray, threshold: float, limit: int) -> list[tuple[str, float]]:
        """Turns whose key's dot product with ``query`` is greater than ``threshold``,
        best first: exact while keys are full; projected, the best of the candidates."""
        if self._axes is None or limit <= 0:
            return self.index.search(query, threshold, limit)
        coarse = self.index.leaders(np.asarray(query, dtype=np.float32) @ self._axes,
                                    CANDIDATES_PER_RESULT * limit, LEADERS)
        return _best(self.scores(coarse, query), limit, threshold)

    def scores(self, ids: Iterable[str], query: np.ndarray) -> dict[str, float]:
        """The dot product of ``query`` with the key of each of ``ids`` that has one."""
        if self._axes is None:
            return self.index.scores(ids, query)
        held, place = self.turns.positions, self._place
        present = sorted({i for i in ids if i in place and i in held})
        if not present:
            return {}
        keys = self._keys(present, self.turns.stored).astype(np.float64)
        # Row by row, as VectorIndex._precise: BLAS may sum a row in another order
        # depending on how many rows it gets, and a score must not depend on the call.
        values = (keys * self.turns.turned(query).astype(np.float64)).sum(axis=1)
        return {message_id: float(v) for message_id, v in zip(present, values, strict=True)}

    def best_among(self, ids: Sequence[str], query: np.ndarray, limit: int
                   ) -> list[tuple[str, float]]:
        """The ``limit`` of ``ids`` whose keys' dot products with ``query`` are largest, best
        first; projected, the best of the candidates the projection ranks first, as
        :meth:`search` (the exact keys of 2,000 turns cost ~30 ms a call of two rounds
        at 100,119 turns)."""
        if self._axes is None:
            return self.index.best_among(ids, query, limit)
        coarse = self.index.best_among(ids, np.asarray(query, dtype=np.float32) @ self._axes,
                                       CANDIDATES_PER_RESULT * limit)
        return _best(self.scores([i for i, _ in coarse], query), limit)

    def moments(self, query: np.ndarray) -> tuple[float, float] | None:
        """Mean and spread of ``query``'s dot product with the keys (see VectorIndex)."""
        if self._axes is None:
            return self.index.moments(query)
        sample = self._sample
        if (sample is None or sample.basis is not self.turns.basis
                or len(self.index) > SAMPLE_GROWTH * sample.size):
            spaced = [i for i in self.index.spaced() if i in self.turns]
            if not spaced:
                return None
            sample = self._sample = _Sample(self.turns.basis, len(self.index),
                                            self._keys(spaced, self.turns.stored))
        # In float32, as the index's own moments: a float64 copy of the sample (6 MB) on
        # every call cost more than the product, and the moments moved by 2e-9 (200
        # questions at 100,119 turns: the same answers, p95 -1.9 ms).
        turned = self.turns.turned(query).astype(np.float32)
        scores = np.asarray(sample.keys @ turned, dtype=np.float64)
        return float(scores.mean()), float(scores.std())

    # -- changing the set ---------------------------------------------------------------

    def fit_if_grown(self) -> None:
        """Project the keys once the set is large enough, again once it has grown a lot;
        then let the index fit its own rotation."""
        grown = len(self._place) >= REFIT_GROWTH * max(1, self._projected_rows)
        if len(self._place) >= PROJECT_FROM and grown:
            self._project()
        self.index.fit_if_grown()

    def upsert(self, rows: Sequence[tuple[str, str, int]]) -> None:
        """Add or replace turns, ``rows`` (id, session id, seq), whose vectors are in
        :attr:`turns`; the keys of their neighbours change with them."""
        affected: set[str] = set()
        for message_id, session_id, seq in rows:
            if message_id in self._place:
                affected |= self._take_out(message_id)
            order = self._order.get(session_id)
            if order is None:
                order = self._order[session_id] = _Order(session_id)
            order.insert(seq, message_id)
            self._place[message_id] = (order, seq)
            affected |= {message_id, *self._beside(message_id)}
        self._recompute(affected)

    def remove(self, ids: Iterable[str]) -> None:
        affected: set[str] = set()
        gone = [i for i in ids if i in self._place]
        for message_id in gone:
            affected |= self._take_out(message_id)
        self.index.remove(gone)
        self._sample = None  # it may hold a forgotten turn's key
        self._recompute(affected - set(gone))

    def key(self, message_id: str) -> np.ndarray:
        """The contextual key of a turn (for tests and explanations)."""
        own, *beside = self.turns.vectors(self._around(message_id))
        neighbourhood = own + sum(beside, np.zeros_like(own))
        norm = float(np.linalg.norm(neighbourhood))
        mixed = own * (1 - self.weight)
        if norm > 1e-12:
            mixed = mixed + neighbourhood * (self.weight / norm)
        return np.asarray(mixed, dtype=np.float32)

    def _take_out(self, message_id: str) -> set[str]:
        """Remove a turn from its session's order; returns the neighbours it had."""
        neighbours = set(self._beside(message_id))
        order, seq = self._place.pop(message_id)
        order.remove(seq, message_id)
        if not order:
            del self._order[order.session_id]
        return neighbours

    def _beside(self, message_id: str) -> list[str]:
        return [n for n in self._sides(message_id) if n is not None]

    def _sides(self, message_id: str) -> tuple[str | None, str | None]:
        """The turns before and after ``message_id`` in its session (None: none)."""
        order, seq = self._place[message_id]
        return order.sides(seq, message_id)

    def _around(self, message_id: str) -> list[str]:
        return [message_id, *self._beside(message_id)]

    def _recompute(self, ids: set[str]) -> None:
        """The keys of ``ids`` again, all at once (a scope's first load recomputes every
        turn's key: one matrix operation, not one per turn)."""
        # A turn the turns' index lacks has no vector to mix: it neither gets a key
        # computed nor lends its vector to a neighbour's.
        present = sorted(i for i in ids if i in self._place and i in self.turns)
        if not present:
            return
        keys = self._keys(present, self.turns.vectors)
        if self._axes is not None:
            keys = keys @ self._axes
        self.index.upsert(present, keys.astype(np.float32), fit=False)

    def _keys(self, present: list[str],
              vectors_of: Callable[[list[str]], np.ndarray]) -> np.ndarray:
        """The keys of ``present`` (each with a place and a vector), from ``vectors_of``
        the turns: as given (``turns.vectors``), or in the turns' basis (``turns.stored``),
        in which a key's dot products are the same."""
        if len(present) <= PROJECT_CHUNK:
            return self._chunk_keys(present, vectors_of)
        # A scope's first load: chunk by chunk, so no (rows, dim) temporaries but the result.
        keys = np.empty((len(present), self.turns.dim), dtype=np.float32)
        for at in range(0, len(present), PROJECT_CHUNK):
            keys[at:at + PROJECT_CHUNK] = self._chunk_keys(present[at:at + PROJECT_CHUNK],
                                                           vectors_of)
        return keys

    def _chunk_keys(self, present: list[str],
                    vectors_of: Callable[[list[str]], np.ndarray]) -> np.ndarray:
        # One read of every vector needed (the turns', those before them, those after): a
        # read per side cost two more gathers of every block, and get_context at 100,119
        # turns reads ~250 keys four times.
        rows: tuple[list[int], list[int]] = ([], [])
        beside: tuple[list[str], list[str]] = ([], [])
        held = self.turns.positions
        for row, message_id in enumerate(present):
            for side, neighbour in enumerate(self._sides(message_id)):
                if neighbour is not None and neighbour in held:
                    rows[side].append(row)
                    beside[side].append(neighbour)
        found = vectors_of([*present, *beside[0], *beside[1]])
        own = found[:len(present)]
        total, at = own.copy(), len(present)
        for targets in rows:  # a row has at most one neighbour a side: no index repeats
            total[targets] += found[at:at + len(targets)]
            at += len(targets)
        norms = np.linalg.norm(total, axis=1, keepdims=True)
        around = np.divide(total, norms, out=np.zeros_like(total), where=norms > 1e-12)
        return np.asarray(own * (1 - self.weight) + around * self.weight, dtype=np.float32)

    def _project(self) -> None:
        """Keep every key along the keys' first :data:`KEPT_DIMS` principal axes (fitted
        on up to FIT_SAMPLE of them), in a new index."""
        present = [i for i in self._place if i in self.turns]
        step = max(1, len(present) // FIT_SAMPLE)
        axes = principal_axes(self._keys(present[::step], self.turns.vectors))
        kept = min(KEPT_DIMS, self.turns.dim)
        self._axes = np.ascontiguousarray(axes[:, :kept], dtype=np.float32)
        self.index = VectorIndex(kept)
        for at in range(0, len(present), PROJECT_CHUNK):
            chunk = present[at:at + PROJECT_CHUNK]
            self.index.upsert(chunk, self._keys(chunk, self.turns.vectors) @ self._axes,
                              fit=False)
        self._projected_rows, self._sample = len(present), None


def _best(exact: dict[str, float], limit: int, threshold: float = -np.inf
          ) -> list[tuple[str, float]]:
    """The best ``limit`` of ``exact`` (id -> score) above ``threshold``, best first; a tie
    to the smaller id."""
    best = sorted((-score, i) for i, score in exact.items() if score > threshold)
    return [(message_id, -negated) for negated, message_id in best[:limit]]
