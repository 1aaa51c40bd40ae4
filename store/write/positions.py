"""Where the database stands in each inbox stream: the last entry a transaction applied.

Recorded inside the transaction that applies the entries, so the position and what it
covers are never apart, in the database file or in any copy of it (a Litestream replica,
a backup). A writer started on a restored database reads its position here and applies
again what the inbox still holds beyond it (:meth:`memq.store.write.writer.Writer.catch_up`);
what the replica had already received is a duplicate, skipped by event id.
"""

from __future__ import annotations

from collections.abc import Iterable

import apsw

from memq.inbox import in_range, stream_position

Position = tuple[int, int]
"""A stream entry id as (milliseconds, sequence): comparable, unlike its text."""


def record(cur: apsw.Cursor, stream_ids: Iterable[tuple[str, str]]) -> None:
    """Move each stream's position to the largest of ``(stream, entry id)`` given; a
    position never moves back (entries reclaimed late are older than what is recorded).
    An id too large to record was set aside with its entry, and moves nothing."""
    last: dict[str, Position] = {}
    for stream, entry_id in stream_ids:
        position = stream_position(entry_id)
        if in_range(position) and position > last.get(stream, (0, 0)):
            last[stream] = position
    cur.executemany(
        """INSERT INTO inbox_positions (stream, ms, seq) VALUES (?, ?, ?)
           ON CONFLICT (stream) DO UPDATE SET ms = excluded.ms, seq = excluded.seq
           WHERE excluded.ms > ms OR (excluded.ms = ms AND excluded.seq > seq)""",
        [(stream, ms, seq) for stream, (ms, seq) in last.items()],
    )


def recorded(conn: apsw.Connection) -> dict[str, Position]:
    """Each stream's recorded position (a stream never applied from is absent)."""
    rows = conn.execute("SELECT stream, ms, seq FROM inbox_positions")
    return {stream: (ms, seq) for stream, ms, seq in rows}
