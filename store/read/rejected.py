"""Reading the events the writer set aside (``store/write/rejected.py`` records them)."""

from __future__ import annotations

from dataclasses import dataclass

import apsw
import orjson

from memq.errors import NotFound


@dataclass(frozen=True)
class Rejected:
    id: int
    stream: str
    """The inbox stream the entry came from: who sent it (see memq.authority)."""
    stream_id: str
    raw: bytes
    reason: str
    attempts: int
    rejected_at: str
    replayed_at: str | None


_COLUMNS = "id, stream, stream_id, raw, reason, attempts, rejected_at, replayed_at"


def list_rejected(conn: apsw.Connection, *, include_replayed: bool = False,
                  limit: int = -1) -> list[Rejected]:
    """Oldest first; at most ``limit`` (-1: all)."""
    where = "" if include_replayed else "WHERE replayed_at IS NULL"
    rows = conn.execute(
        f"SELECT {_COLUMNS} FROM rejected_events {where} ORDER BY id LIMIT ?", (limit,))
    return [Rejected(*row) for row in rows]


def get(conn: apsw.Connection, rejected_id: int) -> Rejected:
    row = conn.execute(
        f"SELECT {_COLUMNS} FROM rejected_events WHERE id = ?", (rejected_id,)
    ).fetchone()
    if row is None:
        raise NotFound(f"no rejected event with id {rejected_id}")
    return Rejected(*row)


def existing(conn: apsw.Connection, ids: list[int]) -> list[int]:
    """Which of ``ids`` are rows of ``rejected_events``."""
    rows = conn.execute("SELECT id FROM rejected_events WHERE id IN "
                        "(SELECT value FROM json_each(?)) ORDER BY id", (orjson.dumps(ids),))
    return [row[0] for row in rows]
