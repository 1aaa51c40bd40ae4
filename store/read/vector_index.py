"""An exact cosine search over unit vectors that reads a tenth of the matrix per query.

A brute-force scan of 100,000 x 384 float32 reads 150 MB and is bound by memory
bandwidth (~15 ms here). Instead, once a set is large enough, the vectors are rotated into
their principal axes (an orthogonal rotation keeps every dot product), so that the first
coordinates carry most of the energy of real sentence embeddings, and stored as column
blocks (by default coordinates 0-31, 32-95 and 96-383). A query scans the first block for
every row, then bounds what the remaining coordinates can add with Cauchy-Schwarz::

    x·q  =  x[:e]·q[:e] + x[e:]·q[e:]  ≤  x[:e]·q[:e] + |x[e:]|·|q[e:]|

and reads the next block only for the rows whose bound still passes the threshold, and
so on: each block is read for fewer rows than the one before. No row that could pass is
skipped, so the results are the brute-force results: the rotation changes how fast a
search is, never what it finds.

Only the first block, which every query scans, is kept as float32 (:data:`FLOAT32_BLOCKS`).
The later blocks are stored as int8 with a scale per row and block (the row's largest
coordinate there maps to 127): 496 bytes a row instead of 1,544. The stored vector is the
dequantized one: the norms, bounds and scores are computed from it, so a search is exact
over what is stored, and what is stored is within ~0.4% per coordinate of what was given
(cosine > 0.9999 to it; the model's own int8 weights move a vector further).

The principal axes are fitted on a sample of the rows, and an exact eigenbasis keeps a
trace of each row it saw: with every other row known, the one missing (a forgotten turn)
could be read back from the axes. So the axes are those of the sample's Gram matrix plus
symmetric Gaussian noise drawn afresh and never kept (:func:`principal_axes`).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from itertools import pairwise

import numpy as np

BLOCK_EDGES = (32, 96)
"""Where the column blocks start. In bench/context.py at 100,000 rows a median query keeps
~7% of the rows after the first 32 coordinates and ~2% after 96, so it reads ~16 MB of
the 150 (a query unrelated to the session is out of reach after the first block)."""

FLOAT32_BLOCKS = 1
"""Leading blocks kept as float32; the rest as int8. The first is read for every row. On
66,000 LoCoMo turns' vectors (the best 50 above 0.3) the second as float32 too takes a
search from 4.5 to 2.9 ms at p50 (7.9 to 7.0 at p95) for 38% more memory."""

FIT_MIN_ROWS = 4096
"""Below this many rows the identity basis is kept: a full scan takes well under 1 ms."""

FIT_CHUNK = 8192
"""Rows turned into a new basis at a time (12 MB of float32 at 384 dimensions)."""

REFIT_GROWTH = 4
"""Fit the rotation again once the set has grown this many times since the last fit."""

FIT_SAMPLE = 20_000
"""Rows sampled to estimate the principal axes (384 x 384, so a sample suffices)."""

AXES_NOISE = 0.5
"""The noise's scale on each entry of the Gram matrix the axes are fitted on. One unit row
adds a rank-one matrix of norm 1; in symmetric noise of scale s it can be told apart only
above s * sqrt(dim) (the spiked Wigner model's threshold): 9.8 for 384 dimensions, ten
times what a row adds. The noise's own norm (~2 s sqrt(dim), 20) is far below the
eigenvalues of the leading axes (thousands over 20,000 rows), which are what a search and
a projection use. It hides a row's direction, not whether a vector one already holds was
among the rows (docs/benchmarks.md: more noise costs the keys' projection too much)."""

BOUND_SLACK = 1e-4
"""Margin for float32 rounding between a bound and the exact score."""

LEAD_SAMPLE_STEP = 8
"""Of a search's leaders (:meth:`VectorIndex.leaders`), every this-many-th score is read to
place a cut above which they are chosen."""

MOMENTS_SAMPLE = 2048
"""Rows, evenly spaced, from which a query's score distribution over a set is estimated."""


class VectorIndex:
    """Unit vectors keyed by id; exact threshold + top-k search by dot product."""

    def __init__(self, dim: int, *, edges: Sequence[int] = BLOCK_EDGES) -> None:
        if dim < 1:
            raise ValueError(f"dim must be at least 1, got {dim}")
        self.dim = dim
        self.cuts = (0, *sorted({e for e in edges if 0 < e < dim}), dim)
        self.spans = list(pairwise(self.cuts))
        self._ids: list[str] = []
        self._pos: dict[str, int] = {}
        self._allocate(0)
        self._rotation: np.ndarray | None = None
        self._fitted_rows = 0
        self.last_candidates = 0
        """Rows whose last block the last search had to read (for benchmarks)."""

    def __len__(self) -> int:
        return len(self._ids)

    def __contains__(self, message_id: object) -> bool:
        return message_id in self._pos

    @property
    def positions(self) -> Mapping[str, int]:
        """Each id's row (read only): for callers that test many ids, a dict's own look-up
        instead of a method call each (the contextual keys test ~600 a search)."""
        return self._pos

    @property
    def nbytes(self) -> int:
        return sum(int(a.nbytes) for a in self._arrays())

    def _arrays(self) -> list[np.ndarray]:
        """Every per-row array, row ``i`` of each being row ``i`` of the set."""
        return [*self._blocks, *self._scales, *self._rest_norms]

    @property
    def rotated(self) -> bool:
        return self._rotation is not None

    # -- changing the set -------------------------------------------------------------

    def upsert(self, ids: Sequence[str], vectors: np.ndarray, *, fit: bool = True) -> None:
        """Add or replace vectors (rows of ``vectors``, expected to be unit length).

        ``fit=False`` leaves the rotation alone (when loading in chunks); call
        :meth:`fit_if_grown` at the end.
        """
        vectors = np.asarray(vectors, dtype=np.float32).reshape(len(ids), self.dim)
        if self._rotation is not None:
            vectors = vectors @ self._rotation
        fresh: list[int] = []
        last_row = {message_id: row for row, message_id in enumerate(ids)}  # last one wins
        for message_id, row in last_row.items():
            at = self._pos.get(message_id)
            if at is None:
                fresh.append(row)
            else:
                self._write(slice(at, at + 1), vectors[row : row + 1])
        if fresh:
            self._append([ids[i] for i in fresh], vectors[fresh])
        if fit:
            self.fit_if_grown()

    def fit_if_grown(self) -> None:
        """Fit the rotation once the set is large enough, again once it has grown a lot."""
        if len(self) >= FIT_MIN_ROWS and len(self) >= REFIT_GROWTH * max(1, self._fitted_rows):
            self._fit()

    def remove(self, ids: Iterable[str]) -> int:
        """Drop the given ids (unknown ones are ignored); returns how many were dropped."""
        dropped = 0
        for message_id in ids:
            at = self._pos.pop(message_id, None)
            if at is None:
                continue
            last = len(self._ids) - 1
            if at != last:  # fill the hole with the last row
                moved = self._ids[last]
                self._ids[at] = moved
                self._pos[moved] = at
                for array in self._arrays():
                    array[at] = array[last]
            for array in self._arrays():  # the spare row keeps nothing of a removed vector
                array[last] = 0
            self._ids.pop()
            dropped += 1
        return dropped

    def _append(self, ids: list[str], vectors: np.ndarray) -> None:
        start, end = len(self._ids), len(self._ids) + len(ids)
        if end > len(self._blocks[0]):
            self._grow(end)
        self._ids.extend(ids)
        self._pos.update((message_id, start + i) for i, message_id in enumerate(ids))
        self._write(slice(start, end), vectors)

    def _write(self, at: slice, vectors: np.ndarray) -> None:
        exact = self._exact_blocks
        for block, (lo, hi) in zip(self._blocks[:exact], self.spans[:exact], strict=True):
            block[at] = vectors[:, lo:hi]
        for block, scales, (lo, hi) in zip(self._blocks[exact:], self._scales,
                                           self.spans[exact:], strict=True):
            part = vectors[:, lo:hi]
            scale = (np.abs(part).max(axis=1, initial=0.0) / 127).astype(np.float32)
            # A block of zeros, or of coordinates so small that their scale is no float32:
            # any scale stores it as zeros, and none may be divided by.
            scale[~(scale > 0)] = 1.0
            block[at] = np.rint(part / scale[:, None])
            # Rounding lengthens a block a little; scaled back to the length it was given,
            # a unit vector stays one, and its score with itself is 1, not 1.0004.
            stored = np.linalg.norm(block[at].astype(np.float32), axis=1) * scale
            wanted = np.linalg.norm(part, axis=1)
            scales[at] = scale * np.divide(wanted, stored, out=np.ones_like(wanted),
                                           where=stored > 0)
        # Of what is stored, block by block from the last: no (rows, dim) copy is made.
        tail = np.zeros(at.stop - at.start, dtype=np.float32)
        for k in range(len(self._blocks) - 1, 0, -1):
            block = self._block(k, at)
            tail += np.einsum("ij,ij->i", block, block)
            self._rest_norms[k - 1][at] = np.sqrt(tail)

    def _grow(self, needed: int) -> None:
        # x1.5 keeps the slack (and the copy on growth) moderate for very large sessions.
        n = len(self._ids)
        old = [a[:n] for a in self._arrays()]
        self._allocate(max(needed, 64, len(self._blocks[0]) * 3 // 2))
        for new, kept in zip(self._arrays(), old, strict=True):
            new[:n] = kept

    def _allocate(self, capacity: int) -> None:
        widths = [hi - lo for lo, hi in self.spans]
        exact = self._exact_blocks
        self._blocks = [np.zeros((capacity, w), dtype=np.float32 if k < exact else np.int8)
                        for k, w in enumerate(widths)]
        # _scales[j]: each row's scale for the j-th int8 block (its values times the scale).
        self._scales = [np.ones(capacity, dtype=np.float32) for _ in widths[exact:]]
        # _rest_norms[k]: the norm of each row's coordinates from the start of block k + 1.
        self._rest_norms = [np.zeros(capacity, dtype=np.float32) for _ in widths[1:]]

    def _fit(self) -> None:
        """Rotate the stored rows into their principal axes (uncentred: dot products)."""
        n = len(self._ids)
        pick = np.arange(n)
        if n > FIT_SAMPLE:
            pick = np.sort(np.random.default_rng(n).choice(n, FIT_SAMPLE, replace=False))
        turn = np.ascontiguousarray(principal_axes(self._rows(pick)), dtype=np.float32)
        base = np.eye(self.dim, dtype=np.float32) if self._rotation is None else self._rotation
        self._rotation = base @ turn
        self._fitted_rows = n
        old = self._blocks, self._scales
        # Fresh arrays sized to the set: growth while loading left up to half unused.
        self._allocate(n + max(64, n // 16))
        # Chunk by chunk, block by block: turning all rows at once held five (n, dim)
        # float32 temporaries (~600 MB at 100,000 rows), and the allocator kept much of it.
        for at in range(0, n, FIT_CHUNK):
            rows = slice(at, min(at + FIT_CHUNK, n))
            rotated = sum(_dequantized(*old, self._exact_blocks, k, rows) @ turn[lo:hi]
                          for k, (lo, hi) in enumerate(self.spans))
            self._write(rows, np.asarray(rotated, dtype=np.float32))

    def _rows(self, rows: np.ndarray) -> np.ndarray:
        """The stored rows ``rows``, every block as float32."""
        return np.hstack([self._block(k, rows) for k in range(len(self._blocks))])

    @property
    def _exact_blocks(self) -> int:
        """How many leading blocks are float32 (the rest are int8)."""
        return min(FLOAT32_BLOCKS, len(self.spans))

    def _block(self, k: int, rows: np.ndarray | slice) -> np.ndarray:
        """Block ``k`` of ``rows`` as float32 (dequantized if it is int8)."""
        return _dequantized(self._blocks, self._scales, self._exact_blocks, k, rows)

    def _block_dot(self, k: int, rows: np.ndarray | slice, part: np.ndarray) -> np.ndarray:
        """Block ``k`` of ``rows`` times ``part``: the int8 values first, then the scales."""
        j = k - self._exact_blocks
        if j < 0:
            return np.asarray(self._blocks[k][rows] @ part)
        values = self._blocks[k][rows].astype(np.float32)  # then BLAS, not numpy's int loop
        return np.asarray((values @ part) * self._scales[j][rows])

    # -- searching --------------------------------------------------------------------

    def search(self, query: np.ndarray, threshold: float, limit: int) -> list[tuple[str, float]]:
        """Ids whose dot product with ``query`` is greater than ``threshold``, best first."""
        n = len(self._ids)
        if n == 0 or limit <= 0:
            return []
        parts = self._split(query)
        rows, partial = np.arange(n), self._blocks[0][:n] @ parts[0]
        cut = threshold
        for k in range(1, len(self._blocks)):
            cut = max(cut, self._kth_score(rows, partial, parts, limit))
            rest = self._rest_norms[k - 1][:n] if len(rows) == n else self._rest_norms[k - 1][rows]
            bound = rest * np.float32(np.linalg.norm(np.concatenate(parts[k:])))
            bound += partial
            keep = np.flatnonzero(bound > cut - BOUND_SLACK)
            rows, partial = rows[keep], partial[keep]
            if len(rows) * 4 > n and k < self._exact_blocks:
                # Most rows pass: one sequential scan beats a gather (not of an int8 block,
                # whose whole product runs outside BLAS: 26 ms for 100,000 x 288).
                partial = partial + self._block_dot(k, slice(0, n), parts[k])[rows]
            else:
                partial = partial + self._block_dot(k, rows, parts[k])
        self.last_candidates = len(rows)
        rows = _near_the_top(rows, partial, threshold, limit)
        precise = self._precise(rows, parts)
        passing = [(-float(score), self._ids[row]) for row, score in zip(rows, precise, strict=True)
                   if score > threshold]
        return [(message_id, -negated) for negated, message_id in sorted(passing)[:limit]]

    def leaders(self, query: np.ndarray, limit: int, pool: int) -> list[str]:
        """Ids of the best ``limit`` of the ``pool`` rows that lead on the first block, best
        first: an approximate search (a row outside the pool is never found), for
        candidates that are scored again. The whole set if it holds no more than ``pool``."""
        n, pool = len(self._ids), max(pool, limit)
        if n <= pool:
            return [message_id for message_id, _ in self.search(query, -np.inf, limit)]
        parts = self._split(query)
        first = self._blocks[0][:n] @ parts[0]
        rows = _leading(first, pool)
        scores = first[rows] + sum(self._block_dot(k, rows, parts[k])
                                   for k in range(1, len(self._blocks)))
        return [self._ids[row] for row in rows[_best_first(scores, limit)]]

    def _kth_score(self, rows: np.ndarray, partial: np.ndarray, parts: list[np.ndarray],
                   limit: int) -> float:
        """A score the ``limit``-th best row reaches for sure: the exact scores of the
        ``limit`` of ``rows`` that lead on their ``partial`` sums so far, the lowest of
        them. No row whose bound stays below it can be among the best ``limit``, whatever
        the threshold: a search for the best 50 of 100,000 with a low threshold reads the
        later blocks for the rows that might beat those 50, not for every row above the
        threshold. Asked again after each block, as the partial sums tell the leaders
        better."""
        if len(partial) <= limit:
            return -np.inf
        lead = np.argpartition(partial, len(partial) - limit)[len(partial) - limit:]
        return float(self._precise(rows[lead], parts).min()) - BOUND_SLACK

    def scores(self, ids: Iterable[str], query: np.ndarray) -> dict[str, float]:
        """The dot product of ``query`` with each of ``ids`` that is in the set."""
        found, values = self._scored(ids, query)
        return {message_id: float(v) for message_id, v in zip(found, values, strict=True)}

    def best_among(self, ids: Iterable[str], query: np.ndarray, limit: int
                   ) -> list[tuple[str, float]]:
        """The ``limit`` of ``ids`` (those in the set) nearest ``query``, best first; a tie
        to the one given first."""
        found, values = self._scored(ids, query)
        return [(found[k], float(values[k])) for k in _best_first(values, limit)]

    def _scored(self, ids: Iterable[str], query: np.ndarray) -> tuple[list[str], np.ndarray]:
        """Those of ``ids`` in the set, once each, and their dot products with ``query``."""
        found = {i: self._pos[i] for i in ids if i in self._pos}
        if not found:
            return [], np.empty(0)
        rows = np.fromiter(found.values(), dtype=np.int64, count=len(found))
        return list(found), self._precise(rows, self._split(query))

    def vectors(self, ids: Iterable[str]) -> np.ndarray:
        """The stored vectors of those of ``ids`` that are in the set, in their order (one
        row each; unrotated: as they were given)."""
        rows = np.fromiter((self._pos[i] for i in ids if i in self._pos), dtype=np.int64)
        found = self._rows(rows)
        # The rotation is orthogonal (products of eigenvector bases): its transpose undoes it.
        return found if self._rotation is None else found @ self._rotation.T

    def stored(self, ids: Sequence[str]) -> np.ndarray:
        """The vectors of ``ids`` (each in the set) as the index keeps them: in its own
        basis, every block as float32. Their dot products with :meth:`turned` of a query
        are the index's scores, without turning each row back (:meth:`vectors`)."""
        return self._rows(np.fromiter(map(self._pos.__getitem__, ids), dtype=np.int64,
                                      count=len(ids)))

    def turned(self, query: np.ndarray) -> np.ndarray:
        """``query`` in the basis of :meth:`stored`."""
        return np.concatenate(self._split(query))

    @property
    def basis(self) -> np.ndarray | None:
        """The rotation the stored rows are in (None: as given); a new array at each fit."""
        return self._rotation

    def moments(self, query: np.ndarray) -> tuple[float, float] | None:
        """Mean and standard deviation of ``query``'s dot product over the set.

        Exact up to :data:`MOMENTS_SAMPLE` rows, estimated from that many evenly spaced
        rows beyond (a calibration needs the spread, not every score). None when empty.
        """
        n = len(self._ids)
        if n == 0:
            return None
        rows = self._spaced_rows()
        parts = self._split(query)
        scores = np.asarray(sum(self._block_dot(k, rows, part) for k, part in enumerate(parts)),
                            dtype=np.float64)
        return float(scores.mean()), float(scores.std())

    def spaced(self) -> list[str]:
        """The ids :meth:`moments` reads: every one up to :data:`MOMENTS_SAMPLE`, that many
        evenly spaced beyond."""
        rows = self._spaced_rows()
        return self._ids[rows] if isinstance(rows, slice) else [self._ids[r] for r in rows]

    def _spaced_rows(self) -> slice | np.ndarray:
        n = len(self._ids)
        if n <= MOMENTS_SAMPLE:
            return slice(0, n)
        return np.linspace(0, n - 1, MOMENTS_SAMPLE, dtype=np.int64)

    def _precise(self, rows: np.ndarray, parts: list[np.ndarray]) -> np.ndarray:
        """Scores of a few rows in float64, summed row by row.

        BLAS may sum a row in a different order depending on how many rows it is given;
        this does not, so a message gets the same score from :meth:`search` and
        :meth:`scores`, and the threshold is applied to exactly the score reported.
        """
        q = np.concatenate(parts).astype(np.float64)
        return np.asarray((self._rows(rows).astype(np.float64) * q).sum(axis=1))

    def _split(self, query: np.ndarray) -> list[np.ndarray]:
        q = np.asarray(query, dtype=np.float32).reshape(self.dim)
        if self._rotation is not None:
            q = q @ self._rotation
        return [np.ascontiguousarray(q[lo:hi]) for lo, hi in self.spans]


def principal_axes(sample: np.ndarray, noise: float | None = None,
                   rng: np.random.Generator | None = None) -> np.ndarray:
    """The principal axes of ``sample``'s rows (uncentred: of dot products), as columns,
    the largest first; fitted so that they give away no one row (:data:`AXES_NOISE`, or
    ``noise``; drawn from ``rng``, by default a fresh generator)."""
    rows = np.asarray(sample, dtype=np.float64)
    gram = rows.T @ rows
    scale = AXES_NOISE if noise is None else noise
    drawn = (rng or np.random.default_rng()).standard_normal(gram.shape) * scale
    gram += (drawn + drawn.T) / np.sqrt(2.0)
    _, axes = np.linalg.eigh(gram)
    return np.asarray(axes[:, ::-1])


def _dequantized(blocks: list[np.ndarray], scales: list[np.ndarray], exact: int, k: int,
                 rows: np.ndarray | slice) -> np.ndarray:
    """Block ``k`` of ``rows`` as float32: the first ``exact`` blocks are float32, the
    others int8 with a scale per row (``scales[k - exact]``)."""
    if k < exact:
        return np.asarray(blocks[k][rows])
    return np.asarray(blocks[k][rows].astype(np.float32) * scales[k - exact][rows, None])


def _best_first(scores: np.ndarray, limit: int) -> np.ndarray:
    """Positions of the best ``limit`` of ``scores``, best first, ties in the order of their
    positions: what a stable sort of all of them would begin with, without sorting all
    (a full sort of 16,384 leaders was a tenth of a keys' search)."""
    if len(scores) <= limit or limit <= 0:
        return np.argsort(-scores, kind="stable")[:max(limit, 0)]
    kth = np.partition(scores, len(scores) - limit)[len(scores) - limit]
    above = np.flatnonzero(scores > kth)
    chosen = np.concatenate([above, np.flatnonzero(scores == kth)[: limit - len(above)]])
    chosen.sort()
    return chosen[np.argsort(-scores[chosen], kind="stable")]


def _leading(scores: np.ndarray, pool: int) -> np.ndarray:
    """Positions of the ``pool`` largest ``scores`` (of those tied at the edge, the first),
    in increasing order: the rows a search then reads are gathered in the order they are
    stored (the leaders' whole search 2.8 -> 2.2 ms at 100,119 keys, bench/context.py
    --realistic). Chosen among those above a cut read from every
    :data:`LEAD_SAMPLE_STEP`-th score, set to keep about a quarter more than ``pool``
    (selecting among all 100,000 took 0.9 ms, this 0.35), or among all if it kept too
    few."""
    n = len(scores)
    sample = scores[::LEAD_SAMPLE_STEP]
    wanted = len(sample) * pool * 5 // (4 * n)
    above = np.arange(n)
    if 0 < wanted < len(sample):
        cut = np.partition(sample, len(sample) - wanted)[len(sample) - wanted]
        kept = np.flatnonzero(scores >= cut)
        above = kept if len(kept) >= pool else above
    values = scores[above]
    edge = np.partition(values, len(above) - pool)[len(above) - pool]
    chosen = values > edge
    # Copies of a turn share a score: however many tie at the edge, only ``pool`` are read.
    chosen[np.flatnonzero(values == edge)[: pool - int(chosen.sum())]] = True
    return np.asarray(above[chosen])


def _near_the_top(rows: np.ndarray, approx: np.ndarray, threshold: float, limit: int) -> np.ndarray:
    """Rows that may pass ``threshold`` and be among the best ``limit``, given float32 error."""
    keep = approx > threshold - BOUND_SLACK
    rows, approx = rows[keep], approx[keep]
    if len(rows) > limit:
        kth = np.partition(approx, len(approx) - limit)[len(approx) - limit]
        rows = rows[approx >= kth - BOUND_SLACK]
    return rows
