"""Reading sessions: a session's committed mark and recent items together, its owner, and
listing sessions by last activity.

The mark (``sessions.changed_seq``, see ``store/projections/sessions.py``) is what the
agent side checks on every read to know whether its copy of a session is still current.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import apsw

from memq import tenants
from memq.store.read.messages import Message, message_from_row
from memq.store.read.scope import Owner
from memq.store.read.summaries import timeline

_MARK = "SELECT changed_seq FROM sessions WHERE session_id = ?"
_LOG_POSITION = "SELECT coalesce(max(seq), 0) FROM events"
__all__ = ["Owner", "SessionInfo", "SessionSnapshot", "list_sessions", "mark", "owner",
           "snapshot"]

_OWNER = """SELECT user_id, agent_id FROM sessions
    WHERE session_id = ? AND last_active_at IS NOT NULL"""


@dataclass(frozen=True)
class SessionInfo:
    """One session: its owner, its first and last message times, how many messages."""

    session_id: str
    user_id: str | None
    agent_id: str | None
    started_at: str
    last_active_at: str
    message_count: int
    """Conversation messages committed (summaries are not counted)."""


@dataclass(frozen=True)
class SessionSnapshot:
    """What one read transaction showed of a session."""

    log_position: int
    """The last ``seq`` in the whole log then: a later snapshot never has a smaller one."""
    mark: int | None
    """The session's ``changed_seq`` then (None: nothing committed for it)."""
    items: list[Message]
    """Its last items, oldest first (see :func:`store.read.summaries.timeline`)."""


def mark(conn: apsw.Connection, session_id: str) -> int | None:
    """The position of the last committed change to the session's messages, if any."""
    row = conn.execute(_MARK, (session_id,)).fetchone()
    return None if row is None else int(row[0])


def snapshot(
    conn: apsw.Connection, session_id: str, limit: int, *, verbatim: int = 0
) -> SessionSnapshot:
    """The session's mark and last ``limit`` items, read in one transaction."""
    with conn:  # a savepoint: one snapshot for every query
        position: int = conn.execute(_LOG_POSITION).get
        rows = timeline(conn, session_id, limit, verbatim=verbatim)
        changed = mark(conn, session_id)
    return SessionSnapshot(position, changed, [message_from_row(row) for row in rows])


def owner(conn: apsw.Connection, session_id: str) -> Owner | None:
    """The owner of a session with committed messages; None if it has none."""
    row = conn.execute(_OWNER, (session_id,)).fetchone()
    return None if row is None else Owner(row[0], row[1])


_COLUMNS = "session_id, user_id, agent_id, started_at, last_active_at, message_count"


def in_tenant(column: str, tenant: str | None, params: dict[str, Any]) -> list[str]:
    """The SQL condition keeping rows whose ``column`` is an id of ``tenant`` (none for
    None); its parameter, ``:mark``, is added to ``params``."""
    if tenant is None:
        return []
    if tenant == tenants.DEFAULT:
        return [f"instr({column}, char({ord(tenants.SEPARATOR)})) = 0"]
    params["mark"] = tenants.inside(tenant, "")
    return [f"substr({column}, 1, length(:mark)) = :mark"]


def list_sessions(
    conn: apsw.Connection, *, user_id: str | None = None, agent_id: str | None = None,
    limit: int = 50, before: str | None = None, tenant: str | None = None,
) -> list[SessionInfo]:
    """Sessions with messages, most recently active first; only ``user_id``'s and/or
    ``agent_id``'s when given; only those last active before ``before`` (an RFC3339 time)
    when given; only ``tenant``'s (:mod:`memq.tenants`) when given."""
    where, params = ["last_active_at IS NOT NULL"], {
        "user": user_id, "agent": agent_id, "before": before, "limit": limit}
    where += in_tenant("session_id", tenant, params)
    if user_id is not None:
        where.append("user_id = :user")
    if agent_id is not None:
        where.append("agent_id = :agent")
    if before is not None:
        where.append("last_active_at < :before")
    rows = conn.execute(
        f"""SELECT {_COLUMNS} FROM sessions WHERE {" AND ".join(where)}
            ORDER BY last_active_at DESC, session_id DESC LIMIT :limit""",
        params,
    )
    return [SessionInfo(*row) for row in rows]
