"""What ``memq status``, ``memq metrics`` and the console report about the writer's side:
the inbox, the writer's heartbeat and figures, Redis' replicas, and the database.
Everything here only reads.

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
from memq.config import DEFAULT_MODEL_NAME
from memq.errors import StoreError
from memq.store.connection import open_connection
from memq.store.read import embedding_backlog
from memq.store.read.identity import database_id

TASKS_DUE_SHOWN = 5
"""How many upcoming scheduled tasks ``status`` lists."""


def inbox(client: redis.Redis) -> dict[str, Any]:
    """The inbox streams together: entries, the writer's lag and pending count, the oldest
    entry's age; ``streams`` has the same figures for each stream."""
    streams = {stream: _stream(client, stream) for stream in names.INBOX_STREAMS}
    ages = [s["oldest_age_s"] for s in streams.values() if s["oldest_age_s"] is not None]
    return {
        "length": sum(s["length"] for s in streams.values()),
        "lag": sum(s["lag"] for s in streams.values()),
        "pending": sum(s["pending"] for s in streams.values()),
        "kept": sum(s["kept"] for s in streams.values()),
        "group_exists": all(s["group_exists"] for s in streams.values()),
        "consumers": max(s["consumers"] for s in streams.values()),
        "oldest_age_s": max(ages) if ages else None,
        "streams": streams,
    }


def _stream(client: redis.Redis, stream: str) -> dict[str, Any]:
    """Length of one inbox stream, the writer group's lag and pending count, the oldest entry."""
    length = int(client.xlen(stream))
    group = _writer_group(client, stream)
    pending = int(group["pending"]) if group else 0
    lag = group.get("lag") if group else None
    # The writer deletes what it acknowledges, so whatever is not pending is unread. Redis
    # reports no lag for a group it cannot compute one for; this is exact in that case too.
    # Redis's own lag counts entries ever added, and a Redis restarted from a file that
    # lost some keeps counting them: never more than the stream holds.
    unread = max(0, length - pending)
    if lag is not None:
        unread = min(int(lag), unread)
    queue = names.INBOX_QUEUES.get(stream)
    queued = int(client.llen(queue)) if queue else 0
    return {
        "length": length,
        "lag": unread + queued,
        "queued": queued,
        "pending": pending,
        # Acknowledged entries the writer keeps for a replica's restore ([replication]).
        "kept": max(0, length - unread - pending),
        "group_exists": group is not None,
        "consumers": int(group["consumers"]) if group else 0,
        "oldest_age_s": _oldest_age(client, stream, group) if pending or unread else None,
        # Items waiting for the relay (store/write/relay.py) have no age Redis knows.
    }


def _writer_group(client: redis.Redis, stream: str) -> dict[str, Any] | None:
    try:
        groups: list[dict[str, Any]] = client.xinfo_groups(stream)
    except redis.exceptions.ResponseError:
        return None  # no stream yet: nothing was ever sent
    for group in groups:
        name = group.get("name")
        if (name.decode() if isinstance(name, bytes) else name) == names.WRITER_GROUP:
            return group
    return None


def _oldest_age(
    client: redis.Redis, stream: str, group: dict[str, Any] | None
) -> float | None:
    """Age of the oldest entry not committed yet: pending, or not read yet (the entries
    kept for a replica are committed, and do not count)."""
    ids: list[Any] = []
    after: Any = "-"
    if group is not None:
        if int(group["pending"]):
            summary: Any = client.xpending(stream, names.WRITER_GROUP)
            ids += [summary["min"]] if summary.get("min") else []
        delivered = group["last-delivered-id"]
        after = "(" + (delivered.decode() if isinstance(delivered, bytes) else delivered)
    first: Any = client.xrange(stream, min=after, count=1)
    ids += [first[0][0]] if first else []
    if not ids:
        return None
    sent_ms = min(int(str(i.decode() if isinstance(i, bytes) else i).split("-", 1)[0])
                  for i in ids)
    return round(max(0.0, time.time() - sent_ms / 1000), 3)


def _text(value: Any) -> str | None:
    return value.decode() if isinstance(value, bytes) else value


def replication(client: redis.Redis) -> dict[str, Any]:
    """The Redis replicas of the master ``client`` talks to, and how far behind the
    furthest is: in bytes of the replication stream, and in seconds since its last
    acknowledgement (``INFO replication``). A replica that lags loses what a failover to
    it would not have: ``[client] wait_replicas`` is how a write waits for them."""
    info: Any = client.info("replication")
    offset = int(info.get("master_repl_offset", 0))
    replicas = [value for name, value in info.items()
                if name.startswith("slave") and isinstance(value, dict)]
    return {
        "role": info.get("role"),
        "replicas": len(replicas),
        "behind_bytes": max((offset - int(r.get("offset", 0)) for r in replicas), default=0),
        "lag_s": max((int(r.get("lag", 0)) for r in replicas), default=0),
    }


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


def database(
    db_path: str | os.PathLike[str], model: str = DEFAULT_MODEL_NAME
) -> dict[str, Any]:
    """Sizes, message embedding states (with the age of the oldest message waiting for a
    vector of ``model``), sessions, rejected events and the next tasks due."""
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
            report["id"] = database_id(conn)
            report.update(_counts(conn))
            report["messages"]["oldest_pending_age_s"] = _rounded(
                embedding_backlog.oldest_age_s(conn, model))
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
        # Sessions of big forgets hidden and still being erased in steps.
        "erasing": _scalar(conn, "SELECT count(*) FROM erasing"),
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


def _rounded(seconds: float | None) -> float | None:
    return None if seconds is None else round(seconds, 3)


def _scalar(conn: Any, sql: str) -> int:
    return int(conn.execute(sql).fetchone()[0])


def _size(path: Path) -> int:
    try:
        return path.stat().st_size
    except FileNotFoundError:
        return 0
