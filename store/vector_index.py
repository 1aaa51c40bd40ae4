"""An exact cosine search over unit vectors that reads about a quarter of the matrix per query.

A brute-force scan of 100,000 x 384 float32 reads 150 MB and is bound by memory
bandwidth (~15 ms here). Instead, once a set is large enough, the vectors are rotated into
their principal axes (an orthogonal rotation keeps every dot product) and stored as two
blocks: the first ``head_dims`` coordinates, which carry most of the energy of real
sentence embeddings, and the rest (the tail). A query first scans only the head block and
bounds what the tail can add with Cauchy-Schwarz::

    x·q  =  x_head·q_head + x_tail·q_tail  ≤  x_head·q_head + |x_tail|·|q_tail|

Only the rows whose bound passes the threshold (a few percent, for real embeddings) have
their tail read. No row that could pass is skipped, so the results are the brute-force
results: the rotation changes how fast a search is, never what it finds.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence

import numpy as np

HEAD_DIMS = 96
"""Coordinates scanned for every row: 96 of 384 hold ~87% of MiniLM's energy, so only a few
percent of the rows need their tail read. Fewer dims scan less but gather more rows."""

FIT_MIN_ROWS = 4096
"""Below this many rows the identity basis is kept: a full scan takes well under 1 ms."""

REFIT_GROWTH = 4
"""Fit the rotation again once the set has grown this many times since the last fit."""

FIT_SAMPLE = 20_000
"""Rows sampled to estimate the principal axes (384 × 384, so a sample suffices)."""

BOUND_SLACK = 1e-4
"""Margin for float32 rounding between the bound and the exact score."""


class VectorIndex:
    """Unit vectors keyed by id; exact threshold + top-k search by dot product."""

    def __init__(self, dim: int, *, head_dims: int = HEAD_DIMS) -> None:
        if dim < 1:
            raise ValueError(f"dim must be at least 1, got {dim}")
        self.dim = dim
        self.head_dims = max(1, min(head_dims, dim))
        self._ids: list[str] = []
        self._pos: dict[str, int] = {}
        self._allocate(0)
        self._rotation: np.ndarray | None = None
        self._fitted_rows = 0
        self.last_candidates = 0
        """Rows whose tail the last search had to read (for benchmarks)."""

    def __len__(self) -> int:
        return len(self._ids)

    def __contains__(self, message_id: object) -> bool:
        return message_id in self._pos

    @property
    def nbytes(self) -> int:
        return int(self._head.nbytes + self._tail.nbytes + self._tail_norm.nbytes)

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
                self._head[at] = self._head[last]
                self._tail[at] = self._tail[last]
                self._tail_norm[at] = self._tail_norm[last]
            self._ids.pop()
            dropped += 1
        return dropped

    def _append(self, ids: list[str], vectors: np.ndarray) -> None:
        start, end = len(self._ids), len(self._ids) + len(ids)
        if end > len(self._head):
            self._grow(end)
        self._ids.extend(ids)
        self._pos.update((message_id, start + i) for i, message_id in enumerate(ids))
        self._write(slice(start, end), vectors)

    def _write(self, at: slice, vectors: np.ndarray) -> None:
        self._head[at] = vectors[:, : self.head_dims]
        self._tail[at] = vectors[:, self.head_dims :]
        self._tail_norm[at] = np.linalg.norm(vectors[:, self.head_dims :], axis=1)

    def _grow(self, needed: int) -> None:
        # x1.5 keeps the slack (and the copy on growth) moderate for very large sessions.
        n = len(self._ids)
        head, tail, tail_norm = self._head[:n], self._tail[:n], self._tail_norm[:n]
        self._allocate(max(needed, 64, len(self._head) * 3 // 2))
        self._head[:n], self._tail[:n], self._tail_norm[:n] = head, tail, tail_norm

    def _allocate(self, capacity: int) -> None:
        self._head = np.zeros((capacity, self.head_dims), dtype=np.float32)
        self._tail = np.zeros((capacity, self.dim - self.head_dims), dtype=np.float32)
        self._tail_norm = np.zeros(capacity, dtype=np.float32)

    def _fit(self) -> None:
        """Rotate the stored rows into their principal axes (uncentred: dot products)."""
        n, h = len(self._ids), self.head_dims
        pick = np.arange(n)
        if n > FIT_SAMPLE:
            pick = np.sort(np.random.default_rng(n).choice(n, FIT_SAMPLE, replace=False))
        sample = np.hstack([self._head[pick], self._tail[pick]]).astype(np.float64)
        _, axes = np.linalg.eigh(sample.T @ sample)
        turn = np.ascontiguousarray(axes[:, ::-1], dtype=np.float32)  # largest first
        # Block product: the rows are never copied into one (n, dim) matrix first.
        rotated = self._head[:n] @ turn[:h] + self._tail[:n] @ turn[h:]
        base = np.eye(self.dim, dtype=np.float32) if self._rotation is None else self._rotation
        self._rotation = base @ turn
        self._fitted_rows = n
        # Fresh arrays sized to the set: growth while loading left up to half unused.
        self._allocate(n + max(64, n // 16))
        self._write(slice(0, n), rotated)

    # -- searching --------------------------------------------------------------------

    def search(self, query: np.ndarray, threshold: float, limit: int) -> list[tuple[str, float]]:
        """Ids whose dot product with ``query`` is greater than ``threshold``, best first."""
        n = len(self._ids)
        if n == 0 or limit <= 0:
            return []
        q_head, q_tail = self._split(query)
        partial = self._head[:n] @ q_head
        bound = partial + self._tail_norm[:n] * np.float32(np.linalg.norm(q_tail))
        rows = np.flatnonzero(bound > threshold - BOUND_SLACK)
        self.last_candidates = len(rows)
        if len(rows) * 4 > n:  # most rows pass: one sequential scan beats a gather
            rows = np.arange(n)
            approx = partial + self._tail[:n] @ q_tail
        else:
            approx = partial[rows] + self._tail[rows] @ q_tail
        rows = _near_the_top(rows, approx, threshold, limit)
        precise = self._precise(rows, q_head, q_tail)
        passing = [(-float(score), self._ids[row]) for row, score in zip(rows, precise, strict=True)
                   if score > threshold]
        return [(message_id, -negated) for negated, message_id in sorted(passing)[:limit]]

    def scores(self, ids: Iterable[str], query: np.ndarray) -> dict[str, float]:
        """The dot product of ``query`` with each of ``ids`` that is in the set."""
        found = {i: self._pos[i] for i in ids if i in self._pos}
        if not found:
            return {}
        rows = np.fromiter(found.values(), dtype=np.int64, count=len(found))
        values = self._precise(rows, *self._split(query))
        return {message_id: float(v) for message_id, v in zip(found, values, strict=True)}

    def _precise(self, rows: np.ndarray, q_head: np.ndarray, q_tail: np.ndarray) -> np.ndarray:
        """Scores of a few rows in float64, summed row by row.

        BLAS may sum a row in a different order depending on how many rows it is given;
        this does not, so a message gets the same score from :meth:`search` and
        :meth:`scores`, and the threshold is applied to exactly the score reported.
        """
        q = np.concatenate([q_head, q_tail]).astype(np.float64)
        matrix = np.hstack([self._head[rows], self._tail[rows]]).astype(np.float64)
        return np.asarray((matrix * q).sum(axis=1))

    def _split(self, query: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        q = np.asarray(query, dtype=np.float32).reshape(self.dim)
        if self._rotation is not None:
            q = q @ self._rotation
        return np.ascontiguousarray(q[: self.head_dims]), np.ascontiguousarray(q[self.head_dims :])


def _near_the_top(rows: np.ndarray, approx: np.ndarray, threshold: float, limit: int) -> np.ndarray:
    """Rows that may pass ``threshold`` and be among the best ``limit``, given float32 error."""
    keep = approx > threshold - BOUND_SLACK
    rows, approx = rows[keep], approx[keep]
    if len(rows) > limit:
        kth = np.partition(approx, len(approx) - limit)[len(approx) - limit]
        rows = rows[approx >= kth - BOUND_SLACK]
    return rows
