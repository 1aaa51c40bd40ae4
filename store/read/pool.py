"""The read side: a small pool of read-only connections, safe to share between threads.

Read transactions are kept short (one query, or a few inside :meth:`ReadPool.connection`)
because a long reader pins the WAL and keeps it from being checkpointed.

An agent may start before the writer, or while the writer creates or migrates the
database. A pool made with ``empty_until_ready`` then reads an empty database of the
current schema (:func:`store.schema.empty_database`) instead of failing: "nothing yet",
until the file exists with every migration this code knows, and from then on the file.
Without it, a missing file is an error (what the command line wants for a wrong ``--db``).
"""

from __future__ import annotations

import os
import queue
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

import apsw

from memq.errors import StoreError
from memq.store import schema
from memq.store.connection import open_connection

MAX_READERS = 5
"""Upper bound on open read-only connections per pool."""

Reader = apsw.Connection
"""What a borrower gets: a read-only connection (named so the agent side never imports apsw)."""

Vet = Callable[[Reader | None], bool]
"""Called with each connection lent, until it returns True: the connection to the file, or
None while reads see the empty database. What it raises, the borrower gets."""


class ReadPool:
    """At most ``size`` read-only connections, opened lazily and reused."""

    def __init__(
        self, db_path: str | os.PathLike[str], size: int = MAX_READERS, *,
        empty_until_ready: bool = False, vet: Vet | None = None,
    ) -> None:
        if not 1 <= size <= MAX_READERS:
            raise ValueError(f"pool size must be between 1 and {MAX_READERS}, got {size}")
        self.db_path = db_path
        self.size = size
        self.empty_until_ready = empty_until_ready
        self._idle: queue.LifoQueue[apsw.Connection] = queue.LifoQueue()
        self._empty: queue.LifoQueue[apsw.Connection] = queue.LifoQueue()
        self._opened = 0
        self._ready = not empty_until_ready
        self._vet = vet
        self._guard = threading.Lock()
        self._slots = threading.BoundedSemaphore(size)

    @property
    def opened(self) -> int:
        return self._opened

    def is_ready(self) -> bool:
        """Whether reads see the database file (always, without ``empty_until_ready``).

        Once true it stays true: a schema is never migrated backwards.
        """
        if not self._ready:
            with self.connection():
                pass  # borrowing checks
        return self._ready

    @contextmanager
    def connection(self) -> Iterator[apsw.Connection]:
        """Borrow a connection; callers beyond ``size`` wait for one to come back."""
        self._slots.acquire()
        try:
            conn, home = self._take()
            try:
                if self._vet is not None and self._vet(conn if home is self._idle else None):
                    self._vet = None  # vetted: never again
                yield conn
            except apsw.Error as exc:
                raise StoreError(f"read from {self.db_path} failed: {exc}") from exc
            finally:
                home.put(conn)
        finally:
            self._slots.release()

    def _take(self) -> tuple[apsw.Connection, queue.LifoQueue[apsw.Connection]]:
        if self._ready:
            return self._file_connection(), self._idle
        if Path(self.db_path).exists():
            conn = self._file_connection()
            if self._is_current(conn):
                self._ready = True
                return conn, self._idle
            self._idle.put(conn)  # kept for the next check
        try:
            return self._empty.get_nowait(), self._empty
        except queue.Empty:
            return schema.empty_database(), self._empty

    def _file_connection(self) -> apsw.Connection:
        try:
            return self._idle.get_nowait()
        except queue.Empty:
            pass
        with self._guard:
            self._opened += 1
        return open_connection(self.db_path, readonly=True)

    def _is_current(self, conn: apsw.Connection) -> bool:
        try:
            return schema.is_current(conn)
        except apsw.Error as exc:
            raise StoreError(f"read from {self.db_path} failed: {exc}") from exc

    def close(self) -> None:
        for idle in (self._idle, self._empty):
            while True:
                try:
                    idle.get_nowait().close()
                except queue.Empty:
                    break
