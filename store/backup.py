"""Copies of the database: an online backup, and putting a copy (a backup or a replica's
restore) in place of the database.

A backup is consistent while the writer goes on committing: it reads through one read
transaction, so every page comes from one snapshot, and in WAL mode that transaction
never blocks the writer. SQLite's backup API restarts a copy when another connection
writes between its steps, unless the source connection holds its own transaction; it
does here, so a backup of a busy database finishes, in steps, with a progress bar.

The copy is written beside its final name and linked into place once complete, in the
rollback-journal mode: one self-contained file, with no WAL to carry along. The writer
turns WAL on again when it opens it.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import time
import uuid
from collections.abc import Callable
from pathlib import Path

import apsw

from memq.errors import StoreError
from memq.store.connection import PRIVATE_SUFFIXES, open_connection
from memq.store.write.lock import WriterLock

STEP_PAGES = 256
"""Pages copied per backup step (1 MiB at 4 KiB pages): small enough for a live bar."""

Progress = Callable[[int, int], None]
"""(pages copied, pages in all), after each step."""


def backup(db_path: str | os.PathLike[str], dest: str | os.PathLike[str],
           progress: Progress | None = None) -> int:
    """Copy the database at ``db_path`` to ``dest`` (a new file); the pages copied."""
    dest = Path(dest)
    if dest.exists():
        raise StoreError(f"{dest} already exists: give a new file name")
    if not Path(db_path).is_file():
        raise StoreError(f"database not found: {db_path}")
    if not dest.parent.is_dir():
        # Not made here: a mistyped directory would hold backups nobody looks for.
        raise StoreError(f"{dest.parent} is not a directory: create it first")
    source = open_connection(db_path, readonly=True)
    aside = _aside(dest)
    try:
        pages = _copy(source, aside, progress)
        _link(aside, dest)
    except apsw.Error as exc:
        raise StoreError(f"backup of {db_path} to {dest} failed: {exc}") from exc
    except OSError as exc:  # a directory that takes no new file (/proc, read-only, full)
        raise StoreError(f"backup of {db_path} to {dest} failed: {exc.strerror}") from exc
    finally:
        source.close()
        _remove(aside)
    return pages


def _copy(source: apsw.Connection, aside: Path, progress: Progress | None) -> int:
    target = _open_target(aside)
    try:
        # One snapshot for the whole copy: the backup then never restarts (see the module).
        source.execute("BEGIN")
        source.execute("SELECT count(*) FROM sqlite_master").fetchall()
        try:
            with target.backup("main", source, "main") as copy:
                while not copy.done:
                    copy.step(STEP_PAGES)
                    if progress is not None:
                        progress(copy.page_count - copy.remaining, copy.page_count)
                pages = copy.page_count
        finally:
            source.execute("COMMIT")
        target.pragma("journal_mode", "delete")
    finally:
        target.close()
    _fsync(aside)
    return int(pages)


def _open_target(path: Path) -> apsw.Connection:
    fd = os.open(path, os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o600)  # private, like the source
    os.close(fd)
    return apsw.Connection(str(path))


def check_copy(path: str | os.PathLike[str], name: str | None = None) -> int:
    """Raise :class:`StoreError` unless ``path`` is an intact memq database; its events.
    ``name`` is what the messages call it (where the copy came from)."""
    name = name or str(path)
    try:
        conn = apsw.Connection(str(path), flags=apsw.SQLITE_OPEN_READONLY)
    except apsw.Error as exc:
        raise StoreError(f"{name} cannot be opened as a database: {exc}") from exc
    try:
        verdict = conn.execute("PRAGMA quick_check").fetchall()
        if verdict != [("ok",)]:
            raise StoreError(f"{name} is damaged: {verdict[0][0]}")
        if not conn.execute("SELECT 1 FROM sqlite_master WHERE name = 'events'").fetchone():
            raise StoreError(f"{name} is a SQLite database, but not memq's (no events table)")
        row = conn.execute("SELECT count(*) FROM events").fetchone()
        return int(row[0]) if row else 0
    except apsw.Error as exc:  # not a database at all
        raise StoreError(f"{name} is not a usable database: {exc}") from exc
    finally:
        conn.close()


def install(copy: str | os.PathLike[str], db_path: str | os.PathLike[str], *,
            force: bool = False) -> Path | None:
    """Put the checked database file ``copy`` in place as ``db_path``.

    Refuses while a writer runs, and over an existing database unless ``force``; then
    the old files (database, WAL, shared memory) are moved aside, not deleted, and the
    place they went is returned. ``copy`` is consumed.
    """
    db_path = Path(db_path)
    with WriterLock(db_path, doing="restore"):
        present = existing_files(db_path)
        if present and not force:
            raise StoreError(f"{db_path} already exists ({', '.join(p.name for p in present)}): "
                             "restoring would replace it; move it away or pass --force")
        _settle(Path(copy))
        kept = _move_aside(db_path, present) if present else None
        _forget_replication_state(db_path)
        os.chmod(copy, 0o600)
        os.replace(copy, db_path)
        _fsync(db_path.parent)
    return kept


def _settle(copy: Path) -> None:
    """Fold any WAL the copy has into its file, and remove its WAL and shared memory: only
    the file moves into place, and a WAL left behind under the scratch name is garbage."""
    conn = apsw.Connection(str(copy))
    try:
        conn.wal_checkpoint(mode=apsw.SQLITE_CHECKPOINT_TRUNCATE)
    except apsw.Error as exc:
        raise StoreError(f"cannot settle the restored copy {copy}: {exc}") from exc
    finally:
        conn.close()
    for suffix in ("-wal", "-shm"):
        with contextlib.suppress(FileNotFoundError):
            os.unlink(f"{copy}{suffix}")


def remove_scratch(path: str | os.PathLike[str]) -> None:
    """Delete a scratch copy and whatever SQLite left beside it."""
    _remove(Path(path))


def existing_files(db_path: Path) -> list[Path]:
    """The database's files present on disk: the file, its WAL, its shared memory."""
    return [p for p in (Path(f"{db_path}{s}") for s in PRIVATE_SUFFIXES) if p.exists()]


def _move_aside(db_path: Path, present: list[Path]) -> Path:
    kept = db_path.with_name(f"{db_path.name}.replaced-{time.strftime('%Y%m%dT%H%M%S')}")
    kept.mkdir(mode=0o700)
    for path in present:
        os.replace(path, kept / path.name)
    return kept


def _forget_replication_state(db_path: Path) -> None:
    """Litestream's local state belongs to the database it watched: with a new file in
    place it must start afresh (its documented advice when a database is recreated)."""
    state = db_path.with_name(f".{db_path.name}-litestream")
    if state.is_dir():
        shutil.rmtree(state)


def scratch_path(db_path: str | os.PathLike[str]) -> Path:
    """A new file name beside ``db_path``, on the same file system (to rename from)."""
    path = Path(db_path)
    try:
        path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
    except OSError as exc:
        raise StoreError(f"cannot create {path.parent}: {exc.strerror}") from exc
    return _aside(path)


def _aside(path: Path) -> Path:
    return path.with_name(f".{path.name}.{os.getpid()}.{uuid.uuid4().hex[:8]}.partial")


def _link(aside: Path, dest: Path) -> None:
    try:
        os.link(aside, dest)  # unlike a rename, never replaces a file that appeared meanwhile
    except FileExistsError:
        raise StoreError(f"{dest} appeared while the backup ran: not replaced") from None


def _remove(path: Path) -> None:
    for suffix in ("", "-journal", "-wal", "-shm"):
        with contextlib.suppress(FileNotFoundError):
            os.unlink(f"{path}{suffix}")


def _fsync(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)
