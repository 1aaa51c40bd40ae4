"""Reading learned macros: the candidates for a call, and whether a macro exists."""

from __future__ import annotations

from dataclasses import dataclass

import apsw

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


MACRO_COLUMNS = (
    "id, trigger_tool, trigger_args_pattern, next_tool, next_args, confidence, used_count, "
    "transition_count, trigger_count, created_at, updated_at"
)


def candidates(conn: apsw.Connection, tool: str, pattern: str) -> list[Macro]:
    """Macros triggered by ``tool`` with this argument pattern or with any arguments."""
    rows = conn.execute(
        f"""SELECT {MACRO_COLUMNS} FROM macros
            WHERE trigger_tool = ? AND trigger_args_pattern IN (?, ?)
            ORDER BY confidence DESC, transition_count DESC, id""",
        (tool, pattern, ANY_ARGS),
    )
    return [Macro(*row) for row in rows]


def trigger_tool(conn: apsw.Connection, macro_id: int) -> str | None:
    """The tool that triggers macro ``macro_id`` (its stored form names its tenant), or None
    if there is no such macro."""
    row = conn.execute("SELECT trigger_tool FROM macros WHERE id = ?", (macro_id,)).fetchone()
    return None if row is None else str(row[0])
