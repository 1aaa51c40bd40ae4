"""The ``macros`` projection: tool transitions learned from ``macro.observed`` events.

The rule itself (patterns, templates, confidence) is :mod:`memq.toolcalls`; this module
only keeps its counts. Per session, ``macro_last_calls`` holds the previous call; each
new call adds one transition from it, under the previous call's argument pattern and
under its tool alone. ``macro_next_args`` counts the argument templates seen after each
macro, at most :data:`MAX_TEMPLATES` per macro (the least used, then the oldest, goes).
``created_at`` / ``updated_at`` come from the events, never from the clock.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import apsw
import orjson

from memq.errors import InvalidEvent
from memq.events import Event, EventType, check_identifier
from memq.toolcalls import ANY_ARGS, args_pattern, confidence, next_args_template
from store.effects import Effects

Applier = Callable[[apsw.Cursor, Event, int, Effects], None]

MAX_TEMPLATES = 16
"""Candidate next-argument templates kept per macro (bounds the table for free text)."""


def apply_observed(cur: apsw.Cursor, event: Event, seq: int, effects: Effects) -> None:
    tool = check_identifier("tool", event.payload["tool"], error=InvalidEvent)
    args: dict[str, Any] = event.payload["args"]
    session = event.session_id
    previous = cur.execute(
        "SELECT tool, args_json FROM macro_last_calls WHERE session_id = ?", (session,)
    ).fetchone()
    if previous is not None:
        previous_tool, previous_args = str(previous[0]), orjson.loads(str(previous[1]))
        learn(cur, previous_tool, previous_args, tool, args, seq, event.created_at)
    cur.execute(
        """INSERT INTO macro_last_calls (session_id, tool, args_json, seq) VALUES (?, ?, ?, ?)
           ON CONFLICT (session_id) DO UPDATE SET
               tool = excluded.tool, args_json = excluded.args_json, seq = excluded.seq""",
        (session, tool, orjson.dumps(args).decode(), seq),
    )


def learn(
    cur: apsw.Cursor, tool: str, args: dict[str, Any], next_tool: str,
    next_args: dict[str, Any], seq: int, at: str,
) -> None:
    """Count one transition ``tool(args)`` → ``next_tool(next_args)``."""
    template = next_args_template(next_args, args)
    for pattern in (args_pattern(args), ANY_ARGS):
        macro_id = _count_transition(cur, tool, pattern, next_tool, at)
        _count_template(cur, macro_id, template, seq)
        _refresh_confidence(cur, tool, pattern)


def _count_transition(cur: apsw.Cursor, tool: str, pattern: str, next_tool: str, at: str) -> int:
    row = cur.execute(
        """INSERT INTO macros (trigger_tool, trigger_args_pattern, next_tool, next_args,
               confidence, used_count, created_at, updated_at, transition_count, trigger_count)
           VALUES (?, ?, ?, NULL, 0.0, 0, ?, ?, 1, 0)
           ON CONFLICT (trigger_tool, trigger_args_pattern, next_tool) DO UPDATE SET
               transition_count = transition_count + 1, updated_at = excluded.updated_at
           RETURNING id""",
        (tool, pattern, next_tool, at, at),
    ).fetchone()
    assert row is not None  # RETURNING always yields the inserted or updated row
    return int(row[0])


def _count_template(cur: apsw.Cursor, macro_id: int, template: str, seq: int) -> None:
    cur.execute(
        """INSERT INTO macro_next_args (macro_id, template, count, last_seq) VALUES (?, ?, 1, ?)
           ON CONFLICT (macro_id, template) DO UPDATE SET
               count = count + 1, last_seq = excluded.last_seq""",
        (macro_id, template, seq),
    )
    cur.execute(
        """DELETE FROM macro_next_args WHERE macro_id = ? AND template NOT IN (
               SELECT template FROM macro_next_args WHERE macro_id = ?
               ORDER BY count DESC, last_seq DESC LIMIT ?)""",
        (macro_id, macro_id, MAX_TEMPLATES),
    )
    cur.execute(
        """UPDATE macros SET next_args = (
               SELECT template FROM macro_next_args WHERE macro_id = ?
               ORDER BY count DESC, last_seq DESC LIMIT 1)
           WHERE id = ?""",
        (macro_id, macro_id),
    )


def _refresh_confidence(cur: apsw.Cursor, tool: str, pattern: str) -> None:
    # n(A) changed, so every successor of A under this pattern gets a new estimate.
    siblings = [
        (int(macro_id), int(count))
        for macro_id, count in cur.execute(
            """SELECT id, transition_count FROM macros
               WHERE trigger_tool = ? AND trigger_args_pattern = ?""",
            (tool, pattern),
        )
    ]
    total = sum(count for _, count in siblings)
    cur.executemany(
        "UPDATE macros SET confidence = ?, trigger_count = ? WHERE id = ?",
        [(confidence(count, total), total, macro_id) for macro_id, count in siblings],
    )


def apply_used(cur: apsw.Cursor, event: Event, seq: int, effects: Effects) -> None:
    macro_id = event.payload["macro_id"]
    cur.execute(
        "UPDATE macros SET used_count = used_count + 1, updated_at = ? WHERE id = ?",
        (event.created_at, macro_id),
    )
    if cur.getconnection().changes() == 0:
        raise InvalidEvent(f"unknown macro {macro_id}")


APPLIERS: dict[str, Applier] = {
    EventType.MACRO_OBSERVED: apply_observed,
    EventType.MACRO_USED: apply_used,
}
