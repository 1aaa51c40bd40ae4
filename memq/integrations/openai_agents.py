"""OpenAI Agents SDK: :class:`MemqSession`, a ``Session`` whose items are memq turns.

Each item the SDK stores is one memq turn of the session: a message item a turn of its
role (``developer`` as ``system``), a tool call an ``assistant`` turn naming the call
(``get_weather({"city": "Paris"})``, with its call id and tool name), a tool call's output
a ``tool`` turn with the call id. The turn's text is what retrieval, consolidation and
``memq status`` see; an item that role and text alone would not give back exactly (any
item but ``{"role": ..., "content": "text"}``) also keeps its JSON, so ``get_items``
returns dicts equal to those added.

An async client (``AsyncMemoryClient``, ``AsyncRemoteMemoryClient``) is awaited. A sync
client's calls are short for a local one (a write returns without waiting for the writer,
a read is a local SQLite read), so they run inline; a sync client that waits on the
network (``RemoteMemoryClient``) should be given ``in_thread=True``, which runs each call
in a worker thread, off the event loop. Writes of one session run one at a time.
"""

from __future__ import annotations

import asyncio
import inspect
import json
from typing import TYPE_CHECKING, Any

from memq.integrations._client import (
    MAX_PAGE,
    AsyncMessageClient,
    MessageClient,
    default_client,
)

if TYPE_CHECKING:
    from agents import TResponseInputItem
    from agents.memory import SessionSettings

    from memq import Message

__all__ = ["MemqSession"]


EXACT_KEY = "openai_agents_item"
"""The key under which a turn's ``tool_calls`` keep the SDK item's JSON."""

_ROLES = {"user": "user", "assistant": "assistant", "system": "system", "developer": "system"}


class MemqSession:
    """The items of memq session ``session_id`` (``agents.memory.Session``);
    ``user_id`` / ``agent_id`` name whose session it is (memq's scopes)."""

    def __init__(self, session_id: str, *,
                 client: MessageClient | AsyncMessageClient | None = None,
                 user_id: str | None = None, agent_id: str | None = None,
                 session_settings: SessionSettings | None = None,
                 in_thread: bool = False) -> None:
        self.session_id = session_id
        self.in_thread = in_thread
        self.session_settings = session_settings
        self.client: MessageClient | AsyncMessageClient = (
            default_client() if client is None else client)
        self.user_id, self.agent_id = user_id, agent_id
        self._writing = asyncio.Lock()

    async def get_items(self, limit: int | None = None) -> list[TResponseInputItem]:
        """The session's items, oldest first; the latest ``limit`` when given (or the
        session settings' limit)."""
        if limit is None and self.session_settings is not None:
            limit = self.session_settings.limit
        if limit is not None and limit <= 0:
            return []
        turns = await self._read(limit)
        return [to_item(turn) for turn in turns]

    async def add_items(self, items: list[TResponseInputItem]) -> None:
        """Send the items to memq; returns without waiting for the writer."""
        async with self._writing:
            await self._append(items)

    async def pop_item(self) -> TResponseInputItem | None:
        """Remove and return the newest item (None for an empty session); returns once
        the forget is committed.

        The newest turn alone is forgotten (``forget_message``): its text, vector and
        events, and a summary built from it. The other turns keep their ids, times,
        vectors and summaries, so the cost does not grow with the session's length.
        """
        async with self._writing:
            return await self._pop()

    async def clear_session(self) -> None:
        """Forget the session (memq erases its turns); returns once that is committed."""
        async with self._writing:
            await self._clear()

    async def _call(self, method: str, *args: Any, **kwargs: Any) -> Any:
        """One client call: awaited for an async client, inline or in a thread otherwise."""
        bound = getattr(self.client, method)
        if self.in_thread:
            return await asyncio.to_thread(bound, *args, **kwargs)
        result = bound(*args, **kwargs)
        return await result if inspect.isawaitable(result) else result

    async def _read(self, limit: int | None) -> list[Message]:
        if limit is None or limit > MAX_PAGE:
            return (await self._whole())[-(limit or 0):]
        turns: list[Message] = await self._call("history", self.session_id, limit=limit,
                                                summaries=False)
        return turns

    async def _whole(self) -> list[Message]:
        """Every turn of the session, oldest first, read a page at a time (no summary:
        the SDK gets back the items it added)."""
        page = await self._call("history", self.session_id, limit=MAX_PAGE, summaries=False)
        pages = [page]
        while len(page) == MAX_PAGE:
            page = await self._call("history", self.session_id, limit=MAX_PAGE,
                                    before=page[0].id, summaries=False)
            pages.append(page)
        return [m for chunk in reversed(pages) for m in chunk]

    async def _append(self, items: list[TResponseInputItem]) -> None:
        for item in items:
            await self._call("append", self.session_id, **from_item(item),
                             user_id=self.user_id, agent_id=self.agent_id)

    async def _pop(self) -> TResponseInputItem | None:
        newest: list[Message] = await self._call("history", self.session_id, limit=1,
                                                 summaries=False)
        if not newest:
            return None
        await self._call("forget_message", self.session_id, newest[-1].id)
        await self._call("flush")
        return to_item(newest[-1])

    async def _clear(self) -> None:
        await self._call("forget_session", self.session_id)
        await self._call("flush")


def from_item(item: TResponseInputItem) -> dict[str, Any]:
    """The ``append`` arguments (role, content, tool fields) of the turn for ``item``."""
    raw: dict[str, Any] = dict(item)
    kind = raw.get("type")
    if kind is None or kind == "message":
        role, content = _ROLES.get(raw.get("role", ""), "user"), _text(raw.get("content"))
    elif str(kind).endswith("_output"):
        role, content = "tool", _text(raw.get("output"))
    else:
        role, content = "assistant", _call_text(raw)
    call_id = raw.get("call_id") if isinstance(raw.get("call_id"), str) else None
    name = raw.get("name") if role == "assistant" and isinstance(raw.get("name"), str) else None
    fields = {"role": role, "content": content, "tool_call_id": call_id, "tool_name": name}
    plain = raw == {"role": role, "content": content}
    return {**fields, "tool_calls": None if plain else [{EXACT_KEY: raw}]}


def to_item(turn: Message) -> TResponseInputItem:
    """The SDK item of a memq turn: its exact JSON when it has one."""
    calls = turn.tool_calls
    if calls and isinstance(calls[0], dict) and EXACT_KEY in calls[0]:
        return calls[0][EXACT_KEY]  # type: ignore[no-any-return]
    if turn.role == "tool":
        return {"type": "function_call_output", "call_id": turn.tool_call_id or "",
                "output": turn.content}
    return {"role": turn.role, "content": turn.content}  # type: ignore[return-value,misc]


def _text(content: Any) -> str:
    """The text of a message's content (a string, or parts with ``text``/``refusal``)."""
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        parts = [p.get("text") or p.get("refusal") for p in content if isinstance(p, dict)]
        text = " ".join(p for p in parts if isinstance(p, str))
        if text:
            return text
    return json.dumps(content, sort_keys=True, default=str)


def _call_text(raw: dict[str, Any]) -> str:
    """A tool call as text: ``name(arguments)``; any other item as its JSON."""
    if isinstance(raw.get("name"), str):
        return f"{raw['name']}({raw.get('arguments', raw.get('input', ''))})"
    return json.dumps(raw, sort_keys=True, default=str)
