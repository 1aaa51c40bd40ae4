"""What ``memq status`` and ``memq metrics`` report about the writer's side: the inbox, the
writer's heartbeat and figures, and the database. Everything here only reads.

The database is opened read-only for one short read transaction, so a status poll never
blocks the writer or pins the WAL for long.
"""

from __future__ import annotations

import os
import time
from pathlib import Path
from typing import Any

import apsw
import redis

from memq import names
from memq.errors import StoreError
from store.connection import open_connection

TASKS_DUE_SHOWN = 5
"""How many upcoming scheduled tasks ``status`` lists."""


def inbox(client: redis.Redis) -> dict[str, Any]:
    """Length of ``memq:inbox``, the writer group's lag and pending count, the oldest entry."""
    length = int(client.xlen(names.INBOX_STREAM))
    group = _writer_group(client)
    pending = int(group["pending"]) if group else 0
    lag = group.get("lag") if group else None
    # The writer deletes what it acknowledges, so whatever is not pending is unread. Redis
    # reports no lag for a group it cannot compute one for; this is exact in that case too.
    unread = int(lag) if lag is not None else length - pending
    return {
        "length": length,
        "lag": unread,
        "pending": pending,
        "group_exists": group is not None,
        "consumers": int(group["consumers"]) if group else 0,
        "oldest_age_s": _oldest_age(client),
    }


def _writer_group(client: redis.Redis) -> dict[str, Any] | None:
    try:
        groups: list[dict[str, Any]] = client.xinfo_groups(names.INBOX_STREAM)
    except redis.exceptions.ResponseError:
        return None  # no stream yet: nothing was ever sent
    for group in groups:
        name = group.get("name")
        if (name.decode() if isinstance(name, bytes) else name) == names.WRITER_GROUP:
            return group
    return None


def _oldest_age(client: redis.Redis) -> float | None:
    first: Any = client.xrange(names.INBOX_STREAM, count=1)
    if not first:
        return None
    sent_ms = int(first[0][0].split(b"-", 1)[0])
    return round(max(0.0, time.time() - sent_ms / 1000), 3)


def _text(value: Any) -> str | None:
    return value.decode() if isinstance(value, bytes) else value


def writer(client: redis.Redis) -> dict[str, Any]:
    """The writer's last heartbeat (absent after 60 s of silence) and its batch figures."""
    beat: Any = client.get(names.WRITER_HEARTBEAT_KEY)
    stats: Any = client.hgetall(names.WRITER_STATS_KEY)
    figures = {k.decode(): v.decode() for k, v in stats.items()}
    return {
        "alive": beat is not None,
        "heartbeat": beat.decode() if beat is not None else None,
        "stalled": _text(client.get(names.WRITER_STALLED_KEY)),
        "batches": int(figures.get("batches", 0)),
        "events_applied": int(figures.get("events_applied", 0)),
        "events_rejected": int(figures.get("events_rejected", 0)),
        "last_batch_size": int(figures.get("last_batch_size", 0)),
        "last_apply_ms": round(float(figures.get("last_apply_seconds", 0)) * 1000, 2),
        "last_lag_ms": round(float(figures.get("last_lag_seconds", 0)) * 1000, 1),
    }


def database(db_path: str | os.PathLike[str]) -> dict[str, Any]:
    """Sizes, message embedding states, sessions, rejected events and the next tasks due."""
    path = Path(db_path)
    report: dict[str, Any] = {
        "path": str(path),
        "size_bytes": _size(path),
        "wal_bytes": _size(Path(f"{path}-wal")),
    }
    conn = open_connection(path, readonly=True)
    try:
        conn.execute("BEGIN")  # one snapshot for every count below
        try:
            report.update(_counts(conn))
            report["tasks_due"] = _tasks_due(conn)
        finally:
            conn.execute("COMMIT")
    except apsw.Error as exc:
        raise StoreError(f"cannot read the status of {path}: {exc}") from exc
    finally:
        conn.close()
    return report


_MESSAGE_STATES = """
    SELECT count(*),
           count(*) FILTER (WHERE embedding IS NOT NULL),
           count(*) FILTER (WHERE embedding IS NULL AND embedding_error IS NOT NULL),
           count(*) FILTER (WHERE embedding IS NULL AND embedding_error IS NULL
                              AND trim(content) != ''),
           count(DISTINCT session_id)
    FROM messages
"""


def _counts(conn: Any) -> dict[str, Any]:
    total, embedded, failed, pending, sessions = conn.execute(_MESSAGE_STATES).fetchone()
    return {
        "events": _scalar(conn, "SELECT count(*) FROM events"),
        "messages": {
            "total": total, "embedded": embedded, "pending": pending, "failed": failed,
            # Empty or whitespace-only messages are never sent to the model.
            "empty": total - embedded - pending - failed,
        },
        "sessions": sessions,
        "rejected": _scalar(conn, "SELECT count(*) FROM rejected_events "
                                  "WHERE replayed_at IS NULL"),
        "facts": _scalar(conn, "SELECT count(*) FROM facts"),
        "tasks": _scalar(conn, "SELECT count(*) FROM scheduled_tasks"),
    }


def _tasks_due(conn: Any) -> list[dict[str, Any]]:
    rows = conn.execute(
        """SELECT id, name, original_schedule, next_run_at FROM scheduled_tasks
           WHERE next_run_at IS NOT NULL AND is_paused = 0
           ORDER BY next_run_at, id LIMIT ?""",
        (TASKS_DUE_SHOWN,),
    ).fetchall()
    return [dict(zip(("id", "name", "schedule", "next_run_at"), row, strict=True))
            for row in rows]


def _scalar(conn: Any, sql: str) -> int:
    return int(conn.execute(sql).fetchone()[0])


def _size(path: Path) -> int:
    try:
        return path.stat().st_size
    except FileNotFoundError:
        return 0
