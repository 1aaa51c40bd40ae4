"""LangChain: :class:`MemqChatMessageHistory`, a chat message history kept in memq.

Each LangChain message is one memq turn of the session: a human message is a ``user``
turn, an AI message an ``assistant`` turn (its tool calls named in the text, so search
finds them), a tool message a ``tool`` turn with its call id. A message that the role and
text alone would not give back exactly (ids, tool calls, metadata, content blocks) also
keeps LangChain's own record of it, so ``messages`` returns messages equal to those added.
Retrieval, consolidation and ``memq status`` see the turns as any other.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any

from langchain_core.chat_history import BaseChatMessageHistory
from langchain_core.messages import (
    AIMessage,
    BaseMessage,
    HumanMessage,
    SystemMessage,
    ToolMessage,
    message_to_dict,
    messages_from_dict,
)

from memq.integrations._client import MessageClient, default_client, whole_history

__all__ = ["MemqChatMessageHistory"]

EXACT_KEY = "langchain_message"
"""The key under which a turn's ``tool_calls`` keep LangChain's record of the message."""

_ROLES = {"human": "user", "ai": "assistant", "system": "system", "tool": "tool"}
_CLASSES: dict[str, type[BaseMessage]] = {
    "user": HumanMessage, "assistant": AIMessage, "system": SystemMessage, "tool": ToolMessage}
_PLAIN_FIELDS = frozenset({"content", "tool_call_id"})


class MemqChatMessageHistory(BaseChatMessageHistory):
    """The messages of memq session ``session_id``; ``user_id`` / ``agent_id`` name whose
    session it is (memq's user and agent scopes) on the turns this history adds."""

    def __init__(self, session_id: str, *, client: MessageClient | None = None,
                 user_id: str | None = None, agent_id: str | None = None) -> None:
        self.session_id = session_id
        self.client: MessageClient = default_client() if client is None else client
        self.user_id, self.agent_id = user_id, agent_id

    @property
    def messages(self) -> list[BaseMessage]:  # type: ignore[override]
        """Every message of the session, oldest first (with this process's own turns that
        the writer has not committed yet)."""
        return [to_langchain(m.role, m.content, m.tool_call_id, m.tool_calls)
                for m in whole_history(self.client, self.session_id)]

    def add_messages(self, messages: Sequence[BaseMessage]) -> None:
        """Send the messages to memq; returns without waiting for the writer."""
        for message in messages:
            role, content, call_id, calls = from_langchain(message)
            self.client.append(self.session_id, role, content, tool_call_id=call_id,
                               tool_calls=calls, user_id=self.user_id, agent_id=self.agent_id)

    def clear(self) -> None:
        """Forget the session (memq erases its turns); returns once that is committed."""
        self.client.forget_session(self.session_id)
        self.client.flush()


def from_langchain(message: BaseMessage) -> tuple[str, str, str | None, list[Any] | None]:
    """(role, text, tool call id, tool calls) of the memq turn for ``message``."""
    role = _ROLES.get(message.type, "user")
    call_id = message.tool_call_id if isinstance(message, ToolMessage) else None
    content = message.text or _calls_text(message)
    plain = _is_plain(message, role, content) or to_langchain(role, content, call_id,
                                                                None) == message
    exact = None if plain else [{EXACT_KEY: message_to_dict(message)}]
    return role, content, call_id, exact


def _is_plain(message: BaseMessage, role: str, content: str) -> bool:
    """Whether role and text alone give ``message`` back, without building one to compare
    (most messages; ~4 µs of an append): its class is the role's, its content that text,
    and pydantic recorded no other field set. False sends it to the full comparison."""
    return (type(message) is _CLASSES[role] and message.content == content
            and message.model_fields_set <= _PLAIN_FIELDS)


def to_langchain(role: str, content: str, tool_call_id: str | None,
                 tool_calls: list[Any] | None) -> BaseMessage:
    """The LangChain message of a memq turn: its exact record when it has one."""
    if tool_calls and isinstance(tool_calls[0], dict) and EXACT_KEY in tool_calls[0]:
        return messages_from_dict([tool_calls[0][EXACT_KEY]])[0]
    if role == "tool":
        return ToolMessage(content=content, tool_call_id=tool_call_id or "")
    return _CLASSES.get(role, HumanMessage)(content=content)


def _calls_text(message: BaseMessage) -> str:
    """An AI message's tool calls as text (``name({"arg": ...})``), for one without text."""
    calls = getattr(message, "tool_calls", None) or []
    text = " ".join(f"{c['name']}({json.dumps(c['args'], sort_keys=True)})" for c in calls)
    return text or f"({message.type} message without text)"
