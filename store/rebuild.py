"""Rebuilding projections from the event log, and checking that they agree with it.

Events are replayed with their original positions (``seq``), so a rebuilt projection is
the same row for row, including the columns that refer to positions.
"""

from __future__ import annotations

import itertools
import os
import tempfile
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import apsw

from memq.errors import StoreError
from memq.store import lexical, schema
from memq.store.connection import open_connection
from memq.store.effects import Effects
from memq.store.projections import apply_event, erasure_steps
from memq.store.write.lock import WriterLock
from memq.store.write.log import read_events

Progress = Callable[[int], None]


def replay(cur: apsw.Cursor, source: apsw.Connection, progress: Progress | None = None) -> int:
    """Apply every event of ``source``'s log to the projections behind ``cur``."""
    effects = Effects()  # a rebuild enqueues nothing: the live writer already did
    count = 0
    for seq, event in read_events(source):
        apply_event(cur, event, seq, effects)
        if effects.erasing:  # what the live writer's steps did before the next forget
            erasure_steps.drain(cur, effects, applied=seq)
        effects.clear()
        count += 1
        if progress is not None and count % 1000 == 0:
            progress(count)
    return count


def rebuild(db_path: str | os.PathLike[str], progress: Progress | None = None) -> int:
    """Replace every projection with one rebuilt from the log; the writer must be stopped."""
    with WriterLock(db_path, doing="rebuild"):
        conn, _ = schema.open_migrated(db_path)
        try:
            return _rebuild_in_place(conn, progress)
        finally:
            conn.close()


def _rebuild_in_place(conn: apsw.Connection, progress: Progress | None) -> int:
    cur = conn.cursor()
    cur.execute("BEGIN IMMEDIATE")
    try:
        for table in schema.PROJECTION_TABLES:
            cur.execute(f"DELETE FROM {table}")
        lexical.clear(cur)
        count = replay(cur, conn, progress)
    except BaseException:
        cur.execute("ROLLBACK")
        raise
    cur.execute("COMMIT")
    return count


def check(db_path: str | os.PathLike[str], limit: int = 10) -> list[str]:
    """Rebuild into a scratch file and list how the live projections differ (empty: equal)."""
    source = open_connection(db_path, readonly=True)
    waiting = schema.pending(source)
    if waiting:
        source.close()
        raise StoreError(
            f"{db_path} is not migrated ({len(waiting)} migrations pending, from "
            f"{waiting[0].name}): run `memq migrate` (or start the writer) first")
    erasing = int(source.execute("SELECT count(*) FROM erasing").get or 0)
    if erasing:  # the projections still hold what the forget hid: they differ until it ends
        source.close()
        return [f"erasing: a forget is still being erased in steps ({erasing} sessions "
                "left, store/projections/erasure_steps.py); check again once the writer "
                "has finished it"]
    directory = Path(db_path).resolve().parent
    with tempfile.TemporaryDirectory(prefix=".memq-rebuild-", dir=directory) as tmp:
        scratch = open_connection(Path(tmp) / "rebuild.db")
        try:
            schema.migrate(scratch)
            cur = scratch.cursor()
            # One read transaction on the source, so the log and its projections are
            # compared at the same moment even while the writer goes on committing.
            source.execute("BEGIN")
            cur.execute("BEGIN")
            _copy_erased_messages(source, cur)
            replay(cur, source)
            cur.execute("COMMIT")
            differences = list(itertools.islice(_differences(source, scratch), limit))
            source.execute("COMMIT")
        finally:
            scratch.close()
            source.close()
    return differences


def _copy_erased_messages(source: apsw.Connection, cur: apsw.Cursor) -> None:
    """What a rebuild in place keeps (bookkeeping, not a projection): a summary whose
    sources retention erased is replayed from it (store/projections/consolidation.py), and
    a turn that followed a forgotten message takes the owner it had from it
    (store/projections/sessions.py)."""
    columns = "message_id, erased_by, session_id, created_at, user_id, agent_id, seq"
    rows = source.execute(f"SELECT {columns} FROM erased_messages").fetchall()
    cur.executemany(f"INSERT INTO erased_messages ({columns}) VALUES (?, ?, ?, ?, ?, ?, ?)",
                    rows)


def _differences(live: apsw.Connection, rebuilt: apsw.Connection) -> Iterator[str]:
    for table in schema.PROJECTION_TABLES:
        columns = [r[1] for r in live.execute(f"PRAGMA table_info({table})")]
        order = ", ".join(columns)
        query = f"SELECT {order} FROM {table} ORDER BY {order}"
        left, right = live.execute(query), rebuilt.execute(query)
        yield from _compare(table, left, right)
    # The lexical index is not a table to read row by row; what it holds is.
    for conn in (live, rebuilt):
        lexical.open_vocabulary(conn)
    for query in lexical.CONTENT_QUERIES:
        yield from _compare("messages_fts", live.execute(query), rebuilt.execute(query))


def _compare(table: str, left: Iterator[Any], right: Iterator[Any]) -> Iterator[str]:
    for a, b in itertools.zip_longest(left, right):
        if a != b:
            yield f"{table}: live {_short(a)} != rebuilt {_short(b)}"


def _short(row: Any) -> str:
    if row is None:
        return "(missing)"
    return repr(tuple(v[:40] if isinstance(v, (str, bytes)) else v for v in row))[:200]


def event_count(db_path: str | os.PathLike[str]) -> int:
    """How many events a rebuild will replay (for its progress bar)."""
    conn = open_connection(db_path, readonly=True)
    try:
        if not conn.execute("SELECT 1 FROM sqlite_master WHERE name = 'events'").fetchone():
            return 0
        row = conn.execute("SELECT count(*) FROM events").fetchone()
        return int(row[0]) if row else 0
    finally:
        conn.close()


def ensure_exists(db_path: str | os.PathLike[str]) -> None:
    if not Path(db_path).exists():
        raise StoreError(f"database not found: {db_path}")
