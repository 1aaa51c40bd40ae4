"""Ordered, recorded migrations, applied with their records in one transaction.

Readers never see a schema half-way: a new database is built aside and linked into place
whole (:func:`open_migrated`), and the migrations pending on an older one are applied in a
single transaction (:func:`migrate`). A reader that needs the current schema and does not
find it reads :func:`empty_database` meanwhile (see ``store/read/pool.py``).

The migrations themselves are in :mod:`memq.store.migrations`.
"""

from __future__ import annotations

import errno
import os
import uuid
from pathlib import Path

import apsw

from memq.clock import now_rfc3339
from memq.errors import MigrationError, StoreError
from memq.store.connection import open_connection, open_in_memory
from memq.store.migrations import MIGRATIONS, Migration, has_table

PROJECTION_TABLES = (
    "messages", "facts", "macros", "scheduled_tasks", "terminal_allowed_prefixes",
    "macro_next_args", "macro_last_calls",
    "summary_sources", "sessions", "documents", "api_keys", "fact_versions",
    "webhooks", "erasing",
)
"""Tables rebuilt from the log by ``memq rebuild``; everything else is log or bookkeeping.

``messages_fts`` (the lexical index) is emptied and refilled by a rebuild too; it is not a
table to compare row by row, so ``memq rebuild --check`` compares what it holds
(``store.lexical.CONTENT_QUERIES``: each word's messages and counts, each message's
token counts)."""


def applied(conn: apsw.Connection) -> list[str]:
    """Names of the migrations already applied (read-only)."""
    if not has_table(conn.cursor(), "schema_migrations"):
        return []
    return [r[0] for r in conn.execute("SELECT name FROM schema_migrations ORDER BY name")]


def pending(conn: apsw.Connection) -> list[Migration]:
    done = set(applied(conn))
    todo = [m for m in MIGRATIONS if m.name not in done]
    return [m for m in todo if not m.last] + [m for m in todo if m.last]


def require_memq(conn: apsw.Connection, db_path: str) -> None:
    """StoreError naming what the file is when it holds no memq database: a reader would
    otherwise meet an empty or another program's SQLite file as 'no such table'."""
    if has_table(conn.cursor(), "events"):
        return
    if conn.execute("SELECT count(*) FROM sqlite_master").get:
        raise StoreError(f"{db_path} is a SQLite database, but not memq's (no events table)")
    raise StoreError(f"{db_path} holds no memq database yet: start the writer (or run "
                     "`memq migrate`) first")


def is_current(conn: apsw.Connection) -> bool:
    """Whether every migration this code knows is applied (read-only; newer ones may be too)."""
    return not pending(conn)


def migrate(conn: apsw.Connection, *, through: str | None = None) -> list[str]:
    """Apply every pending migration, each with its record; return their names.

    All of them in one transaction: SQLite's schema changes are transactional, so a reader
    sees the schema as it was or as it is now, never half-way between two migrations.
    ``through`` leaves out those named after it (tests build older databases).
    """
    cur = conn.cursor()
    cur.execute("BEGIN IMMEDIATE")
    current = "schema_migrations"
    try:
        cur.execute("CREATE TABLE IF NOT EXISTS schema_migrations "
                    "(name TEXT PRIMARY KEY, applied_at TEXT)")
        names = []
        for migration in pending(conn):
            if through is not None and migration.name > through:
                continue
            current = migration.name
            _apply(cur, migration)
            names.append(migration.name)
    except BaseException as exc:
        cur.execute("ROLLBACK")
        if isinstance(exc, apsw.Error):
            raise MigrationError(f"migration {current} failed: {exc}") from exc
        raise
    cur.execute("COMMIT")
    return names


def _apply_one(conn: apsw.Connection, migration: Migration) -> None:
    """One migration alone, in its own transaction (tests build odd old databases so)."""
    cur = conn.cursor()
    cur.execute("BEGIN IMMEDIATE")
    try:
        _apply(cur, migration)
    except BaseException:
        cur.execute("ROLLBACK")
        raise
    cur.execute("COMMIT")


def _apply(cur: apsw.Cursor, migration: Migration) -> None:
    migration.apply(cur)
    cur.execute(
        "INSERT INTO schema_migrations (name, applied_at) VALUES (?, ?)",
        (migration.name, now_rfc3339()),
    )


def open_migrated(path: str | os.PathLike[str]) -> tuple[apsw.Connection, list[str]]:
    """Open ``path`` for writing with its schema up to date; also the migrations applied.

    A missing database is built whole beside its final name and then linked into place, so
    a reader finds no file or a file with every table, never an empty one. The caller
    holds the writer lock.
    """
    path = Path(path)
    created = [] if path.exists() else _create_aside(path)
    conn = open_connection(path)
    try:
        return conn, created or migrate(conn)
    except BaseException:
        conn.close()
        raise


def _create_aside(path: Path) -> list[str]:
    aside = path.with_name(f".{path.name}.{os.getpid()}.{uuid.uuid4().hex[:8]}.new")
    try:
        conn = open_connection(aside)
        try:
            names = migrate(conn)
            # Everything into the main file, so the file alone is the whole database.
            conn.wal_checkpoint(mode=apsw.SQLITE_CHECKPOINT_TRUNCATE)
        finally:
            conn.close()
        try:
            os.link(aside, path)  # unlike a rename, never replaces a file that appeared
        except FileExistsError:
            return []  # created meanwhile by someone else: that one is migrated instead
        except OSError as exc:
            _replace_without_links(aside, path, exc)
        return names
    finally:
        for suffix in ("", "-wal", "-shm"):
            Path(f"{aside}{suffix}").unlink(missing_ok=True)


def _replace_without_links(aside: Path, path: Path, refusal: OSError) -> None:
    """A filesystem without hard links: rename instead (the writer lock is held)."""
    try:
        if refusal.errno not in (errno.EPERM, errno.EXDEV, errno.ENOTSUP):
            raise refusal
        os.replace(aside, path)
    except OSError as exc:
        raise StoreError(f"cannot create database {path}: {exc}") from exc


def empty_database() -> apsw.Connection:
    """A read-only in-memory database with the current schema and no rows: what a reader
    sees of a database that does not exist yet, or is still being created or migrated."""
    conn = open_in_memory()
    migrate(conn)
    conn.pragma("query_only", True)
    return conn
