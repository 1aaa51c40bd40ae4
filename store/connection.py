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


READ_MMAP_BYTES = 1 << 40
"""How much of the database a read-only connection maps: all of it, in practice (SQLite
maps the file's size, not this; apsw's SQLite allows up to 256 TiB). Address space, not
memory."""

PAGE_SIZE = 16384
"""The page size of a database memq creates (bytes)."""

CHECKPOINT_PAGES = 1000
"""WAL pages past which a checkpoint is due (SQLite's own default): the writer's
connection checkpoints at this size by itself, or store/write/checkpoints.py's thread does."""

PRIVATE_SUFFIXES = ("", "-wal", "-shm")
"""The database file and the two SQLite keeps beside it in WAL mode."""


def open_in_memory() -> apsw.Connection:
    """A private in-memory database: no file, so none of the file policy applies."""
    try:
        conn = apsw.Connection(":memory:")
    except apsw.Error as exc:
        raise StoreError(f"cannot open an in-memory database: {exc}") from exc
    conn.set_busy_timeout(BUSY_TIMEOUT_MS)
    return conn


def _create_private(path: Path) -> None:
    # Messages are private conversations: the file is created 0600, and SQLite gives the
    # -wal and -shm files the same mode as the database file. A file that already exists
    # (a legacy database, one copied in with 0644) is made private too, with any WAL and
    # shared-memory file left beside it, before SQLite can create new ones from its mode.
    path.parent.mkdir(parents=True, exist_ok=True)
    fd = os.open(path, os.O_CREAT | os.O_RDWR, 0o600)
    os.close(fd)
    for suffix in PRIVATE_SUFFIXES:
        _make_private(Path(f"{path}{suffix}"))


def _make_private(path: Path) -> None:
    try:
        info = path.stat()
    except FileNotFoundError:
        return
    # Only the owner may change a mode; another user's file is left as they chose.
    if info.st_mode & 0o077 and info.st_uid == os.geteuid():
        path.chmod(0o600)


def _apply_policy(conn: apsw.Connection, *, readonly: bool) -> None:
    conn.set_busy_timeout(BUSY_TIMEOUT_MS)
    if readonly:
        # Readers never write; query_only guards against a stray statement.
        conn.pragma("query_only", True)
        # Pages are read straight from the OS's cache of the file, not copied into each
        # connection's own cache (SQLite's default, ~2 MB: 125 pages) first: a search
        # that reaches a thousand rows scattered over a large file read most of them
        # through a system call each. The mapping is the kernel's page cache, shared by
        # every process and reclaimable, not memory of this one; only the writer ever
        # changes the file, and never shrinks it (no VACUUM), which is when a mapping
        # could fault.
        conn.pragma("mmap_size", READ_MMAP_BYTES)
        # Read the header now: a file that is not a database fails here, at the boundary,
        # rather than in the first query of whoever asked.
        conn.pragma("schema_version")
        return
    # 16 KiB pages for a new database; an existing one keeps its size (SQLite changes it
    # only by a VACUUM outside WAL mode). A forget rewrites every page that held the
    # forgotten data, and at 4 KiB SQLite's work per page (a WAL frame, its checksum, a
    # write) dominated it: bench/forget.py spent ~30% less CPU, ingest ran faster and
    # get_context the same (README "Forgetting a user").
    conn.pragma("page_size", PAGE_SIZE)
    # WAL lets the read-only pool read while the single writer commits.
    mode = conn.pragma("journal_mode", "wal")
    if mode != "wal":
        raise StoreError(f"cannot switch {conn.filename} to WAL (journal_mode is {mode})")
    # FULL, not NORMAL: the writer acknowledges inbox entries right after commit, and Redis
    # then forgets them, so a commit lost to power failure would be an event lost for good.
    # Batches of hundreds of events amortise the extra fsync.
    conn.pragma("synchronous", "FULL")
    conn.pragma("foreign_keys", True)
    # Bound the WAL: checkpoint every 1,000 pages (16 MB, 4 MB in a database of 4 KiB pages)
    # rather than let it grow under a steady writer.
    conn.pragma("wal_autocheckpoint", CHECKPOINT_PAGES)
    # Deleted and overwritten content is zeroed in the file, not left in free space: a
    # forgotten conversation must not stay readable in free pages or freed cell space
    # (store/projections/forgetting.py). Always on, since a row rewritten long before
    # (an embedding added) leaves its old copy behind unless this was on at that time.
    conn.pragma("secure_delete", True)
