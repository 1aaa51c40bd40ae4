"""A conversation turn as the agent side sees it, and how it is read from the database."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import orjson


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
