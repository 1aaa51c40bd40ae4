"""Reading conversation turns: the ``messages`` projection as the agent side sees it."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

import apsw
import orjson

from memq import tenants
from memq.errors import NotFound
from memq.printable import shown
from memq.store.read.hidden import visible
from memq.store.read.scope import Scope
from memq.store.read.summaries import NOT_A_SUMMARY


@dataclass(frozen=True)
class Message:
    id: str
    session_id: str
    role: str
    content: str
    created_at: str
    importance: float
    tool_call_id: str | None = None
    tool_name: str | None = None
    tool_calls: list[Any] | None = None


MESSAGE_COLUMNS = (
    "id, session_id, role, content, created_at, importance, tool_call_id, tool_name, "
    "tool_calls_json"
)
"""The ``messages`` columns :func:`message_from_row` expects, in order."""


def message_from_row(row: tuple[Any, ...]) -> Message:
    mid, session_id, role, content, created_at, importance, call_id, tool_name, calls = row
    return Message(
        mid, session_id, role, content, created_at, importance, call_id, tool_name,
        tool_calls=None if calls is None else orjson.loads(calls),
    )


def chronological_key(message: Message) -> tuple[str, str]:
    """Oldest first; ids are time-ordered, so they break ties between equal timestamps."""
    return message.created_at, message.id


IMPORTANCE_WINDOW = 1000
"""Newest turns searched for important ones before the importance index is used."""

# {turns}: empty, or a condition that leaves the consolidation summaries out.
_HISTORY = f"""SELECT {MESSAGE_COLUMNS} FROM messages WHERE session_id = ? {{turns}}
    AND {visible()} ORDER BY created_at DESC, seq DESC LIMIT ?"""
# Keyset pages, on the index messages_by_session: (created_at, seq) is the session's order.
_ANCHOR = f"SELECT created_at, seq FROM messages WHERE id = ? AND session_id = ? AND {visible()}"
_HISTORY_BEFORE = f"""SELECT {MESSAGE_COLUMNS} FROM messages
    WHERE session_id = ? AND (created_at, seq) < (?, ?) {{turns}} AND {visible()}
    ORDER BY created_at DESC, seq DESC LIMIT ?"""
_HISTORY_AFTER = f"""SELECT {MESSAGE_COLUMNS} FROM messages
    WHERE session_id = ? AND (created_at, seq) > (?, ?) {{turns}} AND {visible()}
    ORDER BY created_at, seq LIMIT ?"""
_IMPORTANT_BY_INDEX = f"""
    SELECT {MESSAGE_COLUMNS} FROM messages WHERE {{scope}} AND importance >= :threshold
    AND {visible()} ORDER BY created_at DESC, seq DESC LIMIT :limit"""
_IMPORTANT_AMONG_NEWEST = f"""
    SELECT {MESSAGE_COLUMNS} FROM messages WHERE id IN (
        SELECT id FROM (
            SELECT id, importance FROM messages INDEXED BY {{index}}
            WHERE {{scope}} AND {visible()} ORDER BY created_at DESC, seq DESC
            LIMIT :window)
        WHERE importance >= :threshold LIMIT :limit)"""
# Row values: turns that share a timestamp (an import) are ordered by their position.
# The next turn is the one after in the same session, whatever the scope searched.
_NEXT_COLUMNS = ", ".join(f"n.{c.strip()}" for c in MESSAGE_COLUMNS.split(","))
# CROSS JOIN: the ids first, each found by its key. Left to itself (no statistics) the
# planner walked the scope's whole index to filter it by the ids: 48 ms in a session of
# 100,000 turns (bench/context.py), for 20 ids.
_FOLLOWING = f"""
    SELECT m.id, {_NEXT_COLUMNS} FROM json_each(:ids) AS wanted
    CROSS JOIN messages m ON m.id = wanted.value
    JOIN messages n ON n.id = (
        SELECT id FROM messages WHERE session_id = m.session_id
            AND (created_at, seq) > (m.created_at, m.seq) AND {visible()}
        ORDER BY created_at, seq LIMIT 1)
    WHERE {{scope}} AND {visible("m")} AND {visible("n")}"""
_BY_IDS = f"""SELECT {MESSAGE_COLUMNS} FROM messages
    WHERE id IN (SELECT value FROM json_each(?)) AND {visible()}"""
_UNEMBEDDED = """SELECT count(*) FROM messages
    WHERE session_id IN (SELECT value FROM json_each(?))
    AND embedding IS NULL AND embedding_error IS NULL AND trim(content) != ''"""


def history(
    conn: apsw.Connection, session_id: str, limit: int, *,
    before: str | None = None, after: str | None = None, summaries: bool = True,
) -> list[Message]:
    """A page of a session's messages, oldest first: the last ``limit``, or the ``limit``
    just before (or just after) the message with id ``before`` (``after``). Without
    ``summaries``, the turns alone: no consolidation summary (each sits where the stretch
    it summarises begins, beside its sources while they are kept).

    Raises :class:`~memq.errors.NotFound` when that message is not in the session.
    """
    turns = "" if summaries else f"AND {NOT_A_SUMMARY}"
    if before is None and after is None:
        rows = conn.execute(_HISTORY.format(turns=turns), (session_id, limit)).fetchall()
        return [message_from_row(row) for row in reversed(rows)]
    anchor_id = before if before is not None else after
    anchor = conn.execute(_ANCHOR, (anchor_id, session_id)).fetchone()
    if anchor is None:
        # The session as its caller named it: the stored form holds the tenant's name.
        raise NotFound(f"no message {shown(anchor_id):.60} in session "
                       f"{shown(tenants.split(session_id)[1]):.60}")
    sql = _HISTORY_BEFORE if before is not None else _HISTORY_AFTER
    rows = conn.execute(sql.format(turns=turns), (session_id, *anchor, limit)).fetchall()
    return [message_from_row(row) for row in (reversed(rows) if before is not None else rows)]


def by_ids(conn: apsw.Connection, ids: list[str]) -> list[Message]:
    """The messages with these ids that exist, in no particular order."""
    if not ids:
        return []
    return [message_from_row(row) for row in conn.execute(_BY_IDS, (_json(ids),))]


def important(
    conn: apsw.Connection, scope: Scope, threshold: float, limit: int
) -> list[Message]:
    """Up to ``limit`` of the scope's turns with importance >= ``threshold``, newest first."""
    # Where important turns are common, walking back from the newest finds `limit` of them
    # at once; where they are rare, that walk would read the whole scope, and (in a
    # session) the importance index is the quick way. Try the first on a bounded window.
    params = {**scope.params(), "window": IMPORTANCE_WINDOW, "threshold": threshold,
              "limit": limit}
    where = scope.condition()
    sql = _IMPORTANT_AMONG_NEWEST.format(index=scope.index, scope=where)
    rows = conn.execute(sql, params).fetchall()
    if len(rows) < limit:
        rows = conn.execute(_IMPORTANT_BY_INDEX.format(scope=where), params).fetchall()
    return [message_from_row(row) for row in rows]


def following(conn: apsw.Connection, scope: Scope, ids: Iterable[str]) -> dict[str, Message]:
    """The turn right after each of ``ids`` (turns of the scope) in its session, if any."""
    wanted = _json(list(ids))
    if wanted == "[]":
        return {}
    sql = _FOLLOWING.format(scope=scope.condition("m"))
    rows = conn.execute(sql, {**scope.params(), "ids": wanted}).fetchall()
    return {str(row[0]): message_from_row(row[1:]) for row in rows}


def count_unembedded(conn: apsw.Connection, session_ids: list[str]) -> int:
    """How many non-empty messages of these sessions have neither a vector nor an error."""
    count: int = conn.execute(_UNEMBEDDED, (_json(session_ids),)).get
    return count


def _json(values: list[str]) -> str:
    return orjson.dumps(values).decode()
