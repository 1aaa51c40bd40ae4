"""The read side's in-process vector cache: per session, its embedded messages' vectors.

A session is loaded once (every embedded message of it), then refreshed incrementally on
each use: only rows whose ``embedded_seq`` is past the last one seen are read, through the
``messages_by_embedded_seq`` index. Blobs are therefore decoded once per process, not on
every search. (That index walk passes over what every session embedded since; only this
session's rows are read whole, and a session in use is refreshed on every search.)

Only vectors of the configured model and dimension are kept, so two models' vectors are
never compared; a message re-embedded by another model leaves the cache, and one
re-embedded by this model replaces its old row. Legacy JSON-array embeddings are read
through :func:`store.vectors.decode` like blobs. Sessions are dropped least recently used
once the cache holds more than ``max_vectors`` vectors (the session in use is kept).
"""

from __future__ import annotations

import itertools
import threading
from collections import OrderedDict
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

import apsw
import numpy as np

from store import vectors
from store.reader import ReadPool
from store.vector_index import VectorIndex

DEFAULT_MAX_VECTORS = 200_000
"""About 300 MB of float32 at 384 dimensions."""

LOAD_CHUNK = 8192
"""Rows decoded at a time when a session is loaded or refreshed."""

_HIGH_WATER = "SELECT max(embedded_seq) FROM messages WHERE embedded_seq IS NOT NULL"
_COLUMNS = "id, embedding, embedding_model, embedding_dim"
_WHOLE_SESSION = f"""
    SELECT {_COLUMNS} FROM messages
    WHERE session_id = ? AND embedded_seq IS NOT NULL AND embedded_seq <= ?"""
# INDEXED BY: with session_id = ? in the query, the planner would otherwise walk the
# whole session by its session index — every row, on every refresh.
_CHANGED_SINCE = f"""
    SELECT {_COLUMNS} FROM messages INDEXED BY messages_by_embedded_seq
    WHERE embedded_seq > ? AND embedded_seq <= ? AND session_id = ?"""


@dataclass
class _Session:
    index: VectorIndex
    loaded: bool = False
    last_seen: int = 0
    lock: threading.Lock = field(default_factory=threading.Lock)


class VectorCache:
    """Vectors of ``model_name`` / ``dim`` per session, refreshed from ``readers``."""

    def __init__(
        self, readers: ReadPool, *, model_name: str, dim: int,
        max_vectors: int = DEFAULT_MAX_VECTORS,
    ) -> None:
        if dim < 1 or max_vectors < 1:
            raise ValueError(f"dim and max_vectors must be at least 1, got {dim}, {max_vectors}")
        self.readers = readers
        self.model_name = model_name
        self.dim = dim
        self.max_vectors = max_vectors
        self._sessions: OrderedDict[str, _Session] = OrderedDict()
        self._lock = threading.Lock()

    def __contains__(self, session_id: object) -> bool:
        with self._lock:
            return session_id in self._sessions

    def vector_count(self, session_id: str | None = None) -> int:
        """Vectors held for one session, or for all of them."""
        with self._lock:
            entries = list(self._sessions.items())
        return sum(len(e.index) for sid, e in entries if session_id in (None, sid))

    @property
    def nbytes(self) -> int:
        with self._lock:
            return sum(e.index.nbytes for e in self._sessions.values())

    def search(
        self, session_id: str, query: np.ndarray, threshold: float, limit: int
    ) -> list[tuple[str, float]]:
        """Ids of the session's messages with cosine > ``threshold`` to ``query``, best first."""
        entry = self._entry(session_id)
        with entry.lock:
            self._refresh(session_id, entry)
            found = entry.index.search(query, threshold, limit)
        self._evict(keep=session_id)
        return found

    def scores(self, session_id: str, ids: Iterable[str], query: np.ndarray) -> dict[str, float]:
        """Cosine of ``query`` to each of ``ids`` that has a vector of this model."""
        entry = self._entry(session_id)
        with entry.lock:
            self._refresh(session_id, entry)
            return entry.index.scores(ids, query)

    def moments(self, session_id: str, query: np.ndarray) -> tuple[float, float] | None:
        """Mean and spread of the cosine of ``query`` over the session (see VectorIndex)."""
        entry = self._entry(session_id)
        with entry.lock:
            self._refresh(session_id, entry)
            found = entry.index.moments(query)
        self._evict(keep=session_id)
        return found

    def refresh(self, session_id: str) -> None:
        """Bring the session up to date with the database now (searches do it anyway)."""
        entry = self._entry(session_id)
        with entry.lock:
            self._refresh(session_id, entry)
        self._evict(keep=session_id)

    def discard(self, session_id: str, ids: Iterable[str]) -> None:
        """Drop vectors of messages that are gone from the database."""
        with self._lock:
            entry = self._sessions.get(session_id)
        if entry is not None:
            with entry.lock:
                entry.index.remove(ids)

    def forget(self, session_id: str) -> None:
        with self._lock:
            self._sessions.pop(session_id, None)

    def _entry(self, session_id: str) -> _Session:
        with self._lock:
            entry = self._sessions.get(session_id)
            if entry is None:
                entry = self._sessions[session_id] = _Session(VectorIndex(self.dim))
            self._sessions.move_to_end(session_id)
            return entry

    def _refresh(self, session_id: str, entry: _Session) -> None:
        """Read what changed since ``entry.last_seen``; the caller holds ``entry.lock``."""
        with self.readers.connection() as conn:
            high = _high_water(conn)
            if entry.loaded and high <= entry.last_seen:
                return
            if entry.loaded:
                cursor = conn.execute(_CHANGED_SINCE, (entry.last_seen, high, session_id))
            else:
                cursor = conn.execute(_WHOLE_SESSION, (session_id, high))
            # In chunks: a large session's blobs are never all held as bytes at once.
            while rows := list(itertools.islice(cursor, LOAD_CHUNK)):
                self._apply(entry.index, rows)
        entry.index.fit_if_grown()
        # Every row with embedded_seq <= high was committed before ``high`` was read, so
        # later changes to this session all have a larger embedded_seq.
        entry.loaded, entry.last_seen = True, high

    def _apply(self, index: VectorIndex, rows: list[tuple[Any, ...]]) -> None:
        blob_ids: list[str] = []
        blobs: list[bytes] = []
        legacy_ids: list[str] = []
        legacy: list[np.ndarray] = []
        stale: list[str] = []
        for message_id, value, model, dim in rows:
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
        index.remove(stale)
        # One join and one frombuffer for all blobs: decoding row by row costs more than
        # reading them when a large session is loaded.
        matrix = np.frombuffer(b"".join(blobs), dtype=vectors.FLOAT32_LE).reshape(-1, self.dim)
        if legacy:
            matrix = np.vstack([matrix, np.asarray(legacy, dtype=np.float32)])
        _upsert_unit(index, blob_ids + legacy_ids, matrix)

    def _evict(self, keep: str) -> None:
        with self._lock:
            total = sum(len(e.index) for e in self._sessions.values())
            for session_id in list(self._sessions):
                if total <= self.max_vectors:
                    return
                if session_id != keep:
                    total -= len(self._sessions.pop(session_id).index)


def _decode_legacy(value: bytes | str) -> np.ndarray | None:
    try:
        return vectors.decode(value)
    except (ValueError, TypeError):  # a malformed legacy JSON array: not searchable
        return None


def _upsert_unit(index: VectorIndex, ids: list[str], matrix: np.ndarray) -> None:
    """Normalise (legacy vectors may not be unit length) and store; zero vectors are skipped."""
    if not ids:
        return
    norms = np.linalg.norm(matrix, axis=1)
    good = np.isfinite(norms) & (norms > 1e-12)  # a zero vector has no direction
    if not good.all():
        ids = [i for i, ok in zip(ids, good, strict=True) if ok]
        matrix, norms = matrix[good], norms[good]
    index.upsert(ids, matrix / norms[:, None], fit=False)


def _high_water(conn: apsw.Connection) -> int:
    row = conn.execute(_HIGH_WATER).fetchone()
    return int(row[0]) if row is not None and row[0] is not None else 0
