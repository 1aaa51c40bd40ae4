"""The read side: a small pool of read-only connections, safe to share between threads.

Read transactions are kept short (one query, or a few inside :meth:`ReadPool.connection`)
because a long reader pins the WAL and keeps it from being checkpointed.
"""

from __future__ import annotations

import os
import queue
import threading
from collections.abc import Iterator
from contextlib import contextmanager

import apsw

from memq.errors import StoreError
from store.connection import open_connection

MAX_READERS = 5
"""Upper bound on open read-only connections per pool."""


class ReadPool:
    """At most ``size`` read-only connections, opened lazily and reused."""

    def __init__(self, db_path: str | os.PathLike[str], size: int = MAX_READERS) -> None:
        if not 1 <= size <= MAX_READERS:
            raise ValueError(f"pool size must be between 1 and {MAX_READERS}, got {size}")
        self.db_path = db_path
        self.size = size
        self._idle: queue.LifoQueue[apsw.Connection] = queue.LifoQueue()
        self._opened = 0
        self._guard = threading.Lock()
        self._slots = threading.BoundedSemaphore(size)

    @property
    def opened(self) -> int:
        return self._opened

    @contextmanager
    def connection(self) -> Iterator[apsw.Connection]:
        """Borrow a connection; callers beyond ``size`` wait for one to come back."""
        self._slots.acquire()
        try:
            conn = self._take()
            try:
                yield conn
            except apsw.Error as exc:
                raise StoreError(f"read from {self.db_path} failed: {exc}") from exc
            finally:
                self._idle.put(conn)
        finally:
            self._slots.release()

    def _take(self) -> apsw.Connection:
        try:
            return self._idle.get_nowait()
        except queue.Empty:
            pass
        with self._guard:
            self._opened += 1
        return open_connection(self.db_path, readonly=True)

    def close(self) -> None:
        while True:
            try:
                self._idle.get_nowait().close()
            except queue.Empty:
                return
