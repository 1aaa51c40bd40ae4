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

Cost: a second index beside the vectors of each scope the recall profile searches (twice
the memory of that scope; ``[retrieval] vector_cache_max_vectors`` counts the vectors
only). The turns' own vectors are read from the scope's index when a key is computed
again, never held a second time. On a scope's first load, keys for 100,000 turns in
~1.9 s against ~0.9 s for the vectors alone (measured on this 2-core machine under load).
"""

from __future__ import annotations

import bisect
from collections.abc import Iterable, Sequence

import numpy as np

from memq.store.read.vector_index import VectorIndex


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
        self._place: dict[str, tuple[str, int]] = {}
        self._order: dict[str, list[tuple[int, str]]] = {}

    def __len__(self) -> int:
        return len(self._place)

    @property
    def nbytes(self) -> int:
        """The keys' arrays (the turns' vectors are their index's)."""
        return self.index.nbytes

    def upsert(self, rows: Sequence[tuple[str, str, int]]) -> None:
        """Add or replace turns, ``rows`` (id, session id, seq), whose vectors are in
        :attr:`turns`; the keys of their neighbours change with them."""
        affected: set[str] = set()
        for message_id, session_id, seq in rows:
            if message_id in self._place:
                affected |= self._take_out(message_id)
            self._place[message_id] = (session_id, seq)
            bisect.insort(self._order.setdefault(session_id, []), (seq, message_id))
            affected |= {message_id, *self._beside(message_id)}
        self._recompute(affected)

    def remove(self, ids: Iterable[str]) -> None:
        affected: set[str] = set()
        gone = [i for i in ids if i in self._place]
        for message_id in gone:
            affected |= self._take_out(message_id)
        self.index.remove(gone)
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
        session_id, seq = self._place.pop(message_id)
        order = self._order[session_id]
        order.remove((seq, message_id))
        if not order:
            del self._order[session_id]
        return neighbours

    def _beside(self, message_id: str) -> list[str]:
        session_id, seq = self._place[message_id]
        order = self._order[session_id]
        at = bisect.bisect_left(order, (seq, message_id))
        return [order[i][1] for i in (at - 1, at + 1) if 0 <= i < len(order)]

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
        sides: list[list[str | None]] = [[], []]
        for message_id in present:
            session_id, seq = self._place[message_id]
            order = self._order[session_id]
            at = bisect.bisect_left(order, (seq, message_id))
            before = order[at - 1][1] if at > 0 else None
            after = order[at + 1][1] if at + 1 < len(order) else None
            sides[0].append(before if before in self.turns else None)
            sides[1].append(after if after in self.turns else None)
        own = self.turns.vectors(present)
        total = own.copy()
        for side in sides:
            known = [n for n, other in enumerate(side) if other is not None]
            if known:
                total[known] += self.turns.vectors([side[n] for n in known])  # type: ignore[misc]
        norms = np.linalg.norm(total, axis=1, keepdims=True)
        around = np.divide(total, norms, out=np.zeros_like(total), where=norms > 1e-12)
        keys = own * (1 - self.weight) + around * self.weight
        self.index.upsert(present, keys.astype(np.float32), fit=False)
