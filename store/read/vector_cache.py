"""The read side's in-process vector cache: per scope, its embedded messages' vectors.

A scope (one session, or every session of a user or of a user's agent: see
:mod:`store.read.scope`) is loaded once (every embedded message of it), then refreshed
incrementally on each use: only rows whose ``embedded_seq`` is past the last one seen
are read, through the ``messages_by_embedded_seq`` index. Blobs are therefore decoded
once per process, not on every search. (That index walk passes over what every session
embedded since; only this scope's rows are read whole, and a scope in use is refreshed
on every search.) A session searched alone and at its user's scope is held twice.

With ``context_weight`` > 0 each scope also holds the turns' contextual keys (see
:mod:`store.read.neighbourhoods`), derived from the same rows; ``keys=True`` searches them.

Only vectors of the configured model and dimension are kept, so two models' vectors are
never compared; a message re-embedded by another model leaves the cache, and one
re-embedded by this model replaces its old row. Legacy JSON-array embeddings are read
through :func:`store.vectors.decode` like blobs. Scopes are dropped least recently used
once the cache holds more than ``max_vectors`` vectors (the scope in use is kept).
"""

from __future__ import annotations

import itertools
import threading
from collections import OrderedDict
from collections.abc import Callable, Iterable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

import apsw
import numpy as np

from memq.store import vectors
from memq.store.read import heap
from memq.store.read.hidden import visible
from memq.store.read.neighbourhoods import Neighbourhoods
from memq.store.read.pool import ReadPool
from memq.store.read.scope import Scope
from memq.store.read.vector_index import VectorIndex

DEFAULT_MAX_VECTORS = 200_000
"""About 95 MiB at 384 dimensions (496 bytes a vector, see :mod:`store.read.vector_index`),
and for the scopes the recall profile searches their contextual keys: as much again, half
as much once a scope is large (see :mod:`store.read.neighbourhoods`)."""

LOAD_CHUNK = 8192
"""Rows decoded at a time when a session is loaded or refreshed."""

_HIGH_WATER = "SELECT max(embedded_seq) FROM messages WHERE embedded_seq IS NOT NULL"
_COLUMNS = "id, embedding, embedding_model, embedding_dim, session_id, seq"
_WHOLE_SCOPE = f"""
    SELECT {_COLUMNS} FROM messages INDEXED BY {{index}}
    WHERE {{scope}} AND embedded_seq IS NOT NULL AND embedded_seq <= :high
      AND {visible()}"""
# INDEXED BY: with the scope's terms in the query, the planner would otherwise walk the
# whole scope by its own index — every row, on every refresh.
_CHANGED_SINCE = f"""
    SELECT {_COLUMNS} FROM messages INDEXED BY messages_by_embedded_seq
    WHERE embedded_seq > :seen AND embedded_seq <= :high AND {{scope}} AND {visible()}"""


@dataclass
class _Entry:
    index: VectorIndex
    keys: Neighbourhoods | None = None
    loaded: bool = False
    last_seen: int = 0
    lock: threading.Lock = field(default_factory=threading.Lock)


class VectorCache:
    """Vectors of ``model_name`` / ``dim`` per scope, refreshed from ``readers``."""

    def __init__(
        self, readers: ReadPool, *, model_name: str, dim: int,
        max_vectors: int = DEFAULT_MAX_VECTORS, context_weight: float = 0.0,
    ) -> None:
        if dim < 1 or max_vectors < 1:
            raise ValueError(f"dim and max_vectors must be at least 1, got {dim}, {max_vectors}")
        if not 0.0 <= context_weight <= 1.0:
            raise ValueError(f"context_weight must be in [0, 1], got {context_weight}")
        heap.map_large_blocks_apart()
        self.context_weight = context_weight
        self.readers = readers
        self.model_name = model_name
        self.dim = dim
        self.max_vectors = max_vectors
        self._entries: OrderedDict[tuple[str, ...], _Entry] = OrderedDict()
        self._lock = threading.Lock()
        self._local = threading.local()
        """``settled``: the scopes this thread has refreshed within :meth:`settled`."""

    def __contains__(self, scope: object) -> bool:
        key = scope.key if isinstance(scope, Scope) else None
        with self._lock:
            return key in self._entries

    def vector_count(self, scope: Scope | None = None) -> int:
        """Vectors held for one scope, or for all of them."""
        with self._lock:
            entries = list(self._entries.items())
        return sum(len(e.index) for key, e in entries if scope is None or key == scope.key)

    def size(self, scope: Scope) -> int:
        """How many of the scope's turns have a vector of this model (loading it if need
        be): the turns a search by meaning sees."""
        entry = self._entry(scope)
        with entry.lock:
            self._refresh(scope, entry)
            return len(entry.index)

    @property
    def nbytes(self) -> int:
        with self._lock:
            return sum(e.index.nbytes + (e.keys.nbytes if e.keys is not None else 0)
                       for e in self._entries.values())

    def search(
        self, scope: Scope, query: np.ndarray, threshold: float, limit: int,
        *, keys: bool = False,
    ) -> list[tuple[str, float]]:
        """Ids of the scope's messages with cosine > ``threshold`` to ``query``, best first
        (``keys``: by their contextual keys' scores instead)."""
        entry = self._entry(scope)
        with entry.lock:
            self._refresh(scope, entry)
            found = _searched(entry, keys).search(query, threshold, limit)
        self._evict(keep=scope.key)
        return found

    def scores(self, scope: Scope, ids: Iterable[str], query: np.ndarray,
               *, keys: bool = False) -> dict[str, float]:
        """Cosine of ``query`` to each of ``ids`` that has a vector of this model."""
        entry = self._entry(scope)
        with entry.lock:
            self._refresh(scope, entry)
            return _searched(entry, keys).scores(ids, query)

    def best_among(self, scope: Scope, ids: Sequence[str], query: np.ndarray, limit: int,
                   *, keys: bool = False) -> list[tuple[str, float]]:
        """The ``limit`` of ``ids`` nearest ``query``, best first, with their scores
        (``keys``: by their contextual keys)."""
        entry = self._entry(scope)
        with entry.lock:
            self._refresh(scope, entry)
            return _searched(entry, keys).best_among(ids, query, limit)

    def vectors(self, scope: Scope, ids: Iterable[str], *, turned: bool = False
                ) -> dict[str, np.ndarray]:
        """The vector of each of ``ids`` the scope holds; ``turned``: in the index's own
        basis, where their dot products with each other are the same, without the cost of
        turning them back (60 x 384 x 384 multiplications, ~1 ms)."""
        entry = self._entry(scope)
        with entry.lock:
            self._refresh(scope, entry)
            present = list(dict.fromkeys(i for i in ids if i in entry.index))
            read = entry.index.stored if turned else entry.index.vectors
            return dict(zip(present, read(present), strict=True))

    def moments(self, scope: Scope, query: np.ndarray,
                *, keys: bool = False) -> tuple[float, float] | None:
        """Mean and spread of the cosine of ``query`` over the scope (see VectorIndex)."""
        entry = self._entry(scope)
        with entry.lock:
            self._refresh(scope, entry)
            found = _searched(entry, keys).moments(query)
        self._evict(keep=scope.key)
        return found

    @contextmanager
    def settled(self) -> Iterator[None]:
        """Within, each scope is refreshed once, by this thread's first read of it, and read
        as it was then: one ``get_context`` reads a scope's vectors up to nine times, and
        each refresh asks the database for its newest vector (~0.25 ms). The call's reads
        then also agree with each other, whatever the writer commits meanwhile."""
        outer = getattr(self._local, "settled", None)
        self._local.settled = set()
        try:
            yield
        finally:
            self._local.settled = outer

    def refresh(self, scope: Scope) -> None:
        """Bring the scope up to date with the database now (searches do it anyway)."""
        entry = self._entry(scope)
        with entry.lock:
            self._refresh(scope, entry)
        self._evict(keep=scope.key)

    def discard(self, scope: Scope, ids: Iterable[str]) -> None:
        """Drop vectors of messages that are gone from the database."""
        with self._lock:
            entry = self._entries.get(scope.key)
        if entry is not None:
            with entry.lock:
                ids = list(ids)
                entry.index.remove(ids)
                if entry.keys is not None:
                    entry.keys.remove(ids)

    def forget(self, scope: Scope) -> None:
        with self._lock:
            self._entries.pop(scope.key, None)

    def forget_where(self, drop: Callable[[tuple[str, ...]], bool]) -> None:
        """Drop every scope whose key ``drop`` accepts (it is loaded again when used)."""
        with self._lock:
            for key in [k for k in self._entries if drop(k)]:
                del self._entries[key]

    def _entry(self, scope: Scope) -> _Entry:
        with self._lock:
            entry = self._entries.get(scope.key)
            if entry is None:
                turns = VectorIndex(self.dim)
                keys = (Neighbourhoods(turns, self.context_weight)
                        if self.context_weight > 0 else None)
                entry = self._entries[scope.key] = _Entry(turns, keys)
            self._entries.move_to_end(scope.key)
            return entry

    def _refresh(self, scope: Scope, entry: _Entry) -> None:
        """Bring ``entry`` up to date, once per :meth:`settled` block; the caller holds
        ``entry.lock``."""
        settled: set[tuple[str, ...]] | None = getattr(self._local, "settled", None)
        if settled is not None and scope.key in settled and entry.loaded:
            return
        self._read_changes(scope, entry)
        if settled is not None:
            settled.add(scope.key)

    def _read_changes(self, scope: Scope, entry: _Entry) -> None:
        """Read what changed since ``entry.last_seen``."""
        read = 0
        with self.readers.connection() as conn:
            high = _high_water(conn)
            if entry.loaded and high <= entry.last_seen:
                return
            params = {**scope.params(), "seen": entry.last_seen, "high": high}
            where = scope.condition()
            if entry.loaded:
                cursor = conn.execute(_CHANGED_SINCE.format(scope=where), params)
            else:
                cursor = conn.execute(_WHOLE_SCOPE.format(index=scope.index, scope=where),
                                      params)
            # In chunks: a large session's blobs are never all held as bytes at once.
            while rows := list(itertools.islice(cursor, LOAD_CHUNK)):
                self._apply(entry, rows)
                read += len(rows)
        entry.index.fit_if_grown()
        if entry.keys is not None:
            entry.keys.fit_if_grown()
        if read >= LOAD_CHUNK:
            heap.give_back_freed_memory()
        # Every row with embedded_seq <= high was committed before ``high`` was read, so
        # later changes to this scope all have a larger embedded_seq.
        entry.loaded, entry.last_seen = True, high

    def _apply(self, entry: _Entry, rows: list[tuple[Any, ...]]) -> None:
        blob_ids: list[str] = []
        blobs: list[bytes] = []
        legacy_ids: list[str] = []
        legacy: list[np.ndarray] = []
        stale: list[str] = []
        for message_id, value, model, dim, *_ in rows:
            if value is None or model != self.model_name or dim != self.dim:
                stale.append(message_id)
            elif isinstance(value, bytes) and len(value) == self.dim * 4:
                blob_ids.append(message_id)
                blobs.append(value)
            else:
                vector = _decode_legacy(value)
                if vector is not None and vector.shape == (self.dim,):
                    legacy_ids.append(message_id)
                    legacy.append(vector)
                else:
                    stale.append(message_id)
        entry.index.remove(stale)
        # One join and one frombuffer for all blobs: decoding row by row costs more than
        # reading them when a large session is loaded.
        matrix = np.frombuffer(b"".join(blobs), dtype=vectors.FLOAT32_LE).reshape(-1, self.dim)
        if legacy:
            matrix = np.vstack([matrix, np.asarray(legacy, dtype=np.float32)])
        ids = _upsert_unit(entry.index, blob_ids + legacy_ids, matrix)
        if entry.keys is not None:
            places = {row[0]: (row[0], str(row[4]), int(row[5])) for row in rows}
            entry.keys.remove(stale)
            entry.keys.upsert([places[i] for i in ids])

    def _evict(self, keep: tuple[str, ...]) -> None:
        with self._lock:
            total = sum(len(e.index) for e in self._entries.values())
            for key in list(self._entries):
                if total <= self.max_vectors:
                    return
                if key != keep:
                    total -= len(self._entries.pop(key).index)


def _decode_legacy(value: bytes | str) -> np.ndarray | None:
    try:
        return vectors.decode(value)
    except (ValueError, TypeError):  # a malformed legacy JSON array: not searchable
        return None


def _searched(entry: _Entry, keys: bool) -> VectorIndex | Neighbourhoods:
    """What a search reads: the turns' vectors, or their contextual keys."""
    if keys and entry.keys is not None:
        return entry.keys
    return entry.index


def _upsert_unit(index: VectorIndex, ids: list[str], matrix: np.ndarray) -> list[str]:
    """Normalise (legacy vectors may not be unit length) and store; zero vectors are
    skipped. Returns the ids stored."""
    if not ids:
        return []
    norms = np.linalg.norm(matrix, axis=1)
    good = np.isfinite(norms) & (norms > 1e-12)  # a zero vector has no direction
    if not good.all():
        ids = [i for i, ok in zip(ids, good, strict=True) if ok]
        matrix, norms = matrix[good], norms[good]
    index.upsert(ids, matrix / norms[:, None], fit=False)
    return ids


def _high_water(conn: apsw.Connection) -> int:
    row = conn.execute(_HIGH_WATER).fetchone()
    return int(row[0]) if row is not None and row[0] is not None else 0
