"""Reading learned macros: the candidates for a call, and whether a macro exists."""

from __future__ import annotations

from collections.abc import Collection
from dataclasses import dataclass

import apsw
import orjson

from memq.toolcalls import ANY_ARGS


@dataclass(frozen=True)
class Macro:
    id: int
    trigger_tool: str
    trigger_args_pattern: str
    next_tool: str
    next_args: str | None  # a template (JSON), see memq.toolcalls
    confidence: float
    used_count: int
    transition_count: int
    trigger_count: int
    created_at: str
    updated_at: str
    owner: str | None = None
    """The stored user whose calls taught it; None: the tenant-wide aggregate."""


MACRO_COLUMNS = (
    "id, trigger_tool, trigger_args_pattern, next_tool, next_args, confidence, used_count, "
    "transition_count, trigger_count, created_at, updated_at, owner"
)

# The terms of the index macros_by_transition (its third column is `ifnull(owner, '')`).
_CANDIDATES = f"""
    SELECT {MACRO_COLUMNS} FROM macros
    WHERE trigger_tool = :tool AND trigger_args_pattern IN (:pattern, '{ANY_ARGS}')
      AND ifnull(owner, '') IN (SELECT value FROM json_each(:holders))
    ORDER BY confidence DESC, transition_count DESC, id"""


def candidates(conn: apsw.Connection, tool: str, pattern: str,
               owners: Collection[str] | None = None) -> list[Macro]:
    """Macros triggered by ``tool`` with this argument pattern or with any arguments: the
    tenant-wide aggregate's, or with ``owners`` (stored user ids) those users' rows."""
    holders = [""] if owners is None else sorted(owners)
    rows = conn.execute(_CANDIDATES, {"tool": tool, "pattern": pattern,
                                      "holders": orjson.dumps(holders).decode()})
    return [Macro(*row) for row in rows]


def trigger_tool(conn: apsw.Connection, macro_id: int) -> str | None:
    """The tool that triggers macro ``macro_id`` (its stored form names its tenant), or None
    if there is no such macro."""
    row = conn.execute("SELECT trigger_tool FROM macros WHERE id = ?", (macro_id,)).fetchone()
    return None if row is None else str(row[0])


def owner(conn: apsw.Connection | apsw.Cursor, macro_id: object) -> str | None:
    """The stored user whose rows macro ``macro_id`` is one of; None for the tenant-wide
    aggregate's and for a macro that does not exist."""
    row = conn.execute("SELECT owner FROM macros WHERE id = ?", (macro_id,)).fetchone()
    return None if row is None or row[0] is None else str(row[0])
