"""The summariser interface, the guard rails every summary passes, and the choice of
summariser for a configuration.

A summariser turns a chunk of messages into a :class:`Summary`: a text and, for a model
that can, durable facts it proposes. Two implementations: :mod:`workers.llm` (an
OpenAI-compatible chat endpoint, when ``[llm] base_url`` is set) and
:mod:`workers.extractive` (built in, no network). Whatever the summariser, the stored
content is :func:`compose`'s header plus its text, and :func:`check` rejects an empty
summary or one that is not shorter than its sources.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any, Protocol

from memq.clock import parse_rfc3339
from memq.errors import SummariserError, ValidationError
from memq.events import ROLES


@dataclass(frozen=True)
class ChunkMessage:
    """One message of a chunk, as the writer put it in the job."""

    id: str
    role: str
    content: str
    created_at: str

    @property
    def moment(self) -> datetime | None:
        try:
            return parse_rfc3339(self.created_at)
        except ValidationError:
            return None  # a legacy timestamp: the summary just shows no time for it


@dataclass(frozen=True)
class Fact:
    category: str
    key: str
    value: str


@dataclass(frozen=True)
class Summary:
    text: str
    facts: tuple[Fact, ...] = ()


class Summariser(Protocol):
    name: str

    def summarise(self, messages: Sequence[ChunkMessage]) -> Summary:
        """Summarise ``messages`` (oldest first); raises :class:`SummariserError`."""
        ...


def parse_messages(raw: Any) -> list[ChunkMessage]:
    """The job's ``messages`` argument, checked: a non-empty list of message objects."""
    if not isinstance(raw, list) or not raw:
        raise ValidationError("messages must be a non-empty list")
    messages = []
    for i, item in enumerate(raw):
        if not isinstance(item, dict) or set(item) != {"id", "role", "content", "created_at"}:
            raise ValidationError(f"messages[{i}] must have exactly id, role, content, created_at")
        if not all(isinstance(v, str) for v in item.values()) or item["role"] not in ROLES:
            raise ValidationError(f"messages[{i}] has a value of the wrong type or role")
        messages.append(ChunkMessage(**item))
    return messages


def stamp(message: ChunkMessage) -> str:
    """``2023-05-25 13:14`` in UTC (the raw text when it is not RFC3339)."""
    moment = message.moment
    return message.created_at[:16] if moment is None else moment.strftime("%Y-%m-%d %H:%M")


def header(messages: Sequence[ChunkMessage]) -> str:
    """``Summary of 18 messages from 2023-05-25 13:14 to 13:40 UTC:``."""
    first, last = stamp(messages[0]), stamp(messages[-1])
    count = f"{len(messages)} message{'s' if len(messages) > 1 else ''}"
    if first == last:
        return f"Summary of {count} on {first} UTC:"
    if first[:10] == last[:10]:
        last = last[11:]
    return f"Summary of {count} from {first} to {last} UTC:"


def compose(messages: Sequence[ChunkMessage], summary: Summary) -> str:
    """The content stored for the summary: the header, then the summariser's text."""
    return f"{header(messages)}\n{summary.text.strip()}"


def check(messages: Sequence[ChunkMessage], summary: Summary) -> str:
    """The guard rails; returns the content to store, else raises :class:`SummariserError`."""
    if not summary.text.strip():
        raise SummariserError("the summary is empty; the messages stay unconsolidated")
    content = compose(messages, summary)
    chars_in = sum(len(m.content) for m in messages)
    if len(content) >= chars_in:
        raise SummariserError(
            f"the summary has {len(content)} characters, not fewer than its sources' "
            f"{chars_in}; the messages stay unconsolidated"
        )
    return content
