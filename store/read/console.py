"""What the console shows that no client call returns: users at a glance, and a session's
timeline with each turn's state (embedded, summarised into which summary).

Bounded reads only: the console answers on databases of millions of turns, so every list
is a page, and a turn's text comes cut to :data:`SHOWN_CHARS` (tool outputs run long).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import apsw
import orjson

from memq.store.read.hidden import visible
from memq.store.read.sessions import in_tenant

SHOWN_CHARS = 2000
"""The most of a turn's text a timeline carries; the rest is counted, not read."""


@dataclass(frozen=True)
class UserRow:
    user_id: str
    """As stored: a tenant's users in their tenant's form (:mod:`memq.tenants`)."""
    sessions: int
    turns: int
    last_active_at: str


@dataclass(frozen=True)
class Turn:
    id: str
    role: str
    content: str
    """At most :data:`SHOWN_CHARS` of it."""
    length: int
    created_at: str
    importance: float
    embedded: bool
    summary_id: str | None
    """The summary that stands in for it, once consolidated."""
    seq: int


def users(conn: apsw.Connection, limit: int, *, tenant: str | None = None,
          among: list[str] | None = None, agents: list[str] | None = None) -> list[UserRow]:
    """Users with sessions, most recently active first; only ``tenant``'s, only those
    ``among``, and only their sessions with ``agents`` (stored ids), when given: the
    counts are of those sessions alone."""
    params: dict[str, Any] = {
        "limit": limit, "among": None if among is None else orjson.dumps(among).decode(),
        "agents": None if agents is None else orjson.dumps(agents).decode()}
    where = ["user_id IS NOT NULL", "last_active_at IS NOT NULL",
             *in_tenant("user_id", tenant, params)]
    if among is not None:
        where.append("user_id IN (SELECT value FROM json_each(:among))")
    if agents is not None:
        where.append("agent_id IN (SELECT value FROM json_each(:agents))")
    rows = conn.execute(
        f"""SELECT user_id, count(*), total(message_count), max(last_active_at)
            FROM sessions WHERE {" AND ".join(where)}
            GROUP BY user_id ORDER BY max(last_active_at) DESC, user_id LIMIT :limit""",
        params)
    return [UserRow(user, sessions, int(turns), last) for user, sessions, turns, last in rows]


_TIMELINE = f"""
    SELECT id, role, substr(content, 1, {SHOWN_CHARS}), length(content), created_at,
           importance, embedding IS NOT NULL,
           (SELECT summary_id FROM summary_sources WHERE source_id = messages.id), seq
    FROM messages INDEXED BY messages_by_session
    WHERE session_id = :session AND {visible()} {{before}}
    ORDER BY created_at DESC, seq DESC LIMIT :limit"""


def timeline(conn: apsw.Connection, session_id: str, limit: int,
             before: tuple[str, int] | None = None) -> list[Turn]:
    """A page of the session's turns and summaries, newest first: the ``limit`` before
    ``before`` (a turn's ``(created_at, seq)``), or the newest."""
    where = "" if before is None else "AND (created_at, seq) < (:at, :seq)"
    params = {"session": session_id, "limit": limit,
              "at": before[0] if before else None, "seq": before[1] if before else None}
    rows = conn.execute(_TIMELINE.format(before=where), params)
    return [Turn(i, role, text, length, at, importance, bool(embedded), summary, seq)
            for i, role, text, length, at, importance, embedded, summary, seq in rows]
