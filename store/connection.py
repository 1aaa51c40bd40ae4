"""The one place that opens SQLite connections and sets their policy."""

from __future__ import annotations

import os
from pathlib import Path

import apsw

from memq.errors import StoreError

BUSY_TIMEOUT_MS = 5000
"""How long a connection waits on a lock before failing; readers rarely wait at all in WAL."""


def open_connection(path: str | os.PathLike[str], *, readonly: bool = False) -> apsw.Connection:
    """Open ``path`` with memq's policy; the writer creates the file when it is missing."""
    path = Path(path)
    try:
        if readonly:
            if not path.exists():
                raise StoreError(f"database not found: {path}")
            flags = apsw.SQLITE_OPEN_READONLY
        else:
            _create_private(path)
            flags = apsw.SQLITE_OPEN_READWRITE | apsw.SQLITE_OPEN_CREATE
        conn = apsw.Connection(str(path), flags=flags)
        _apply_policy(conn, readonly=readonly)
    except (apsw.Error, OSError, ValueError) as exc:
        # OSError: a directory or an unwritable place; ValueError: a NUL in the path.
        raise StoreError(f"cannot open database {path}: {exc}") from exc
    return conn


def _create_private(path: Path) -> None:
    # Messages are private conversations: the file is created 0600, and SQLite gives the
    # -wal and -shm files the same mode as the database file.
    path.parent.mkdir(parents=True, exist_ok=True)
    fd = os.open(path, os.O_CREAT | os.O_RDWR, 0o600)
    os.close(fd)


def _apply_policy(conn: apsw.Connection, *, readonly: bool) -> None:
    conn.set_busy_timeout(BUSY_TIMEOUT_MS)
    if readonly:
        # Readers never write; query_only guards against a stray statement.
        conn.pragma("query_only", True)
        # Read the header now: a file that is not a database fails here, at the boundary,
        # rather than in the first query of whoever asked.
        conn.pragma("schema_version")
        return
    # WAL lets the read-only pool read while the single writer commits.
    mode = conn.pragma("journal_mode", "wal")
    if mode != "wal":
        raise StoreError(f"cannot switch {conn.filename} to WAL (journal_mode is {mode})")
    # FULL, not NORMAL: the writer acknowledges inbox entries right after commit, and Redis
    # then forgets them, so a commit lost to power failure would be an event lost for good.
    # Batches of hundreds of events amortise the extra fsync.
    conn.pragma("synchronous", "FULL")
    conn.pragma("foreign_keys", True)
    # Bound the WAL: checkpoint every ~4 MB rather than let it grow under a steady writer.
    conn.pragma("wal_autocheckpoint", 1000)
