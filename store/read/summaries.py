"""Reading summaries: what a summary stands for, and a session's timeline in which
consolidated originals give way to the summary that replaces them.

Read side only (any connection, including the read-only pool's). Originals are never
assumed gone: a summary's sources may later be deleted by a retention policy, and a
message consolidated before summaries were recorded (a legacy import) has no summary, so
it stays in the timeline as itself.
"""

from __future__ import annotations

from typing import Any

import apsw

from memq.store.read.hidden import visible

TIMELINE_COLUMNS = (
    "id, session_id, role, content, created_at, importance, tool_call_id, tool_name, "
    "tool_calls_json"
)
"""The columns :func:`timeline` returns, in the order ``producers.client.message_from_row``
reads them."""

# Summaries are system messages (store/projections/consolidation.py): the role spares
# every other turn the lookup.
NOT_A_SUMMARY = """NOT (role = 'system' AND EXISTS (
    SELECT 1 FROM summary_sources AS ss WHERE ss.summary_id = messages.id))"""
"""SQL condition on ``messages``: the row is a turn, not a summary."""

NOT_SUMMARISED = (
    "NOT EXISTS (SELECT 1 FROM summary_sources AS ss WHERE ss.source_id = messages.id)"
)
"""SQL condition on ``messages``: no summary stands in for the row."""


def timeline(
    conn: apsw.Connection, session_id: str, limit: int, *, verbatim: int = 0
) -> list[tuple[Any, ...]]:
    """The last ``limit`` items of a session, oldest first, as :data:`TIMELINE_COLUMNS`.

    The newest ``verbatim`` original messages come as they are, consolidated or not
    (the recency window). Before them, a consolidated original is replaced by its
    summary, which sits where the stretch it summarises begins; a summary whose every
    source is inside the verbatim window is left out, as it would only repeat it.
    """
    with conn:  # a savepoint: one snapshot for both queries, nested in the caller's
        recent = _newest(conn, session_id, NOT_A_SUMMARY, min(verbatim, limit), None)
        bound = recent[-1][-2:] if recent else None
        older = _newest(conn, session_id, NOT_SUMMARISED, limit - len(recent), bound)
    return [row[:-2] for row in [*reversed(older), *reversed(recent)]]


def _newest(
    conn: apsw.Connection, session_id: str, condition: str, limit: int,
    before: tuple[Any, ...] | None,
) -> list[tuple[Any, ...]]:
    if limit <= 0:
        return []
    where = f"session_id = ? AND {condition} AND {visible()}"
    params: list[Any] = [session_id]
    if before is not None:
        where += " AND (created_at, seq) < (?, ?)"
        params += list(before)
    return conn.execute(
        f"""SELECT {TIMELINE_COLUMNS}, created_at, seq FROM messages WHERE {where}
            ORDER BY created_at DESC, seq DESC LIMIT ?""",
        (*params, limit),
    ).fetchall()


def sources_of(conn: apsw.Connection, summary_id: str) -> list[str]:
    """The ids a summary was made from, in conversation order (empty: not a summary)."""
    rows = conn.execute(
        "SELECT source_id FROM summary_sources WHERE summary_id = ? ORDER BY position",
        (summary_id,),
    )
    return [row[0] for row in rows]


def summary_of(conn: apsw.Connection, message_id: str) -> str | None:
    """The id of the summary that stands in for a message, if any."""
    row = conn.execute(
        "SELECT summary_id FROM summary_sources WHERE source_id = ?", (message_id,)
    ).fetchone()
    return None if row is None else str(row[0])
