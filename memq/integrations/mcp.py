"""MCP: ``memq mcp`` serves memq's memory to any MCP client as five tools.

``remember`` records a turn, ``recall`` reads what memq would put in a context (each item
saying why it is there), ``facts`` lists or sets facts, ``schedule`` schedules a prompt,
``forget`` erases a session or one of its turns. The descriptions are written for the
model that picks the tools. Over stdio (a client starts ``memq mcp``) or streamable HTTP
(``--http``, on 127.0.0.1 by default). The server acts with an agent's credentials.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any, Literal

from mcp.server.mcpserver import MCPServer
from mcp.server.mcpserver.exceptions import ToolError

from memq import MemqError, ValidationError
from memq.integrations._client import ToolsClient, default_client

__all__ = ["INSTRUCTIONS", "build_server", "serve"]

INSTRUCTIONS = (
    "Long-term memory for this conversation and its user. Call `recall` before answering "
    "anything that may depend on what was said or decided earlier; call `remember` for each "
    "turn worth keeping (the user's words, your answers, tool results); keep stable "
    "knowledge about the user (preferences, names, constraints) with `facts`. Use the same "
    "session_id for one conversation and the same user_id for one person.")


def build_server(client: ToolsClient | None = None) -> MCPServer:
    """An MCP server whose tools act through ``client`` (default: from the environment)."""
    memory: ToolsClient = default_client() if client is None else client
    # The SDK runs each call in a worker thread; a client's writes go one at a time.
    writing = threading.Lock()
    server = MCPServer("memq", instructions=INSTRUCTIONS)

    @server.tool()
    def remember(session_id: str, content: str,
                 role: Literal["user", "assistant", "tool", "system"] = "user",
                 user_id: str | None = None, importance: float | None = None) -> dict[str, str]:
        """Store one turn of a conversation in long-term memory. Call it for each turn worth
        keeping: what the user said (role "user"), your reply ("assistant"), a tool's result
        ("tool"). session_id names the conversation; user_id (on the first turn of a
        session) names the person, so that later sessions can recall it. importance from
        0.0 to 1.0 (default by role, 0.5 for user and assistant): use 0.9 or more for
        something that must not be lost. Returns the message id."""
        with told(), writing:
            mid = memory.append(session_id, role, content, importance=importance,
                                user_id=user_id)
        return {"message_id": mid}

    @server.tool()
    def recall(session_id: str, query: str | None = None,
               scope: Literal["session", "user", "agent"] = "session") -> list[dict[str, Any]]:
        """Read back what memory holds for a conversation before you answer: the latest
        turns, the important ones and, given a query, the ones closest in meaning or words
        to it. scope "user" also searches the user's other sessions, "agent" every session
        of the user with this agent. Each item says why it was found: branches (recency,
        importance, semantic, lexical, fact) and their scores; similarity is the cosine to
        the query. Oldest first."""
        with told():
            return [item.to_dict() for item in memory.get_context(session_id, query, scope)]

    @server.tool()
    def facts(category: str | None = None, key: str | None = None, value: str | None = None,
              user_id: str | None = None) -> list[dict[str, Any]]:
        """List or set durable facts (one value per category and key), e.g. category
        "preferences", key "seat", value "window". With key and value: set that fact
        (replacing its value) for user_id, or globally without one. Without value: list the
        global facts and user_id's, only category's when given. A fact the user set
        themselves is protected: your change is recorded but does not replace it. Returns
        the facts of that category after the change."""
        with told():
            if value is None:
                return [_fact(f) for f in memory.facts(category, user_id=user_id)]
            if key is None or category is None:
                raise ValidationError("to set a fact, give category, key and value")
            with writing:
                memory.set_fact(category, key, value, user_id=user_id)
            try:
                with writing:
                    memory.flush()
                return [_fact(f) for f in memory.facts(category, user_id=user_id)]
            except MemqError as exc:
                # Set, but the wait or the listing refused (a write-only key, or a budget
                # the write used up): the model must learn it was set, or it sets it again.
                raise ToolError(f"the fact was set; {exc}") from exc

    @server.tool()
    def schedule(name: str, when: str, prompt: str, tz: str | None = None) -> dict[str, str]:
        """Schedule a prompt to come back to the agents later, once or repeatedly. when is
        cron ("30 9 * * 1-5") or plain English: "in 2 hours", "tomorrow at 9am", "every
        Monday and Friday at 3pm", "weekdays at 8:30am", "daily". tz is an IANA zone
        ("Europe/Berlin"; default: the server's). Returns the task id."""
        with told(), writing:
            task_id = memory.schedule_task(name, when, prompt, tz=tz)
        return {"task_id": task_id}

    @server.tool()
    def forget(session_id: str, message_id: str | None = None) -> dict[str, str]:
        """Erase a conversation from memory for good: its turns, summaries and search
        entries. With message_id (the id `remember` returned, or a `recall` item's id),
        erase only that turn and the summary built from it. Only when the user asks for
        it; it cannot be undone."""
        with told(), writing:
            if message_id is None:
                event_id = memory.forget_session(session_id)
            else:
                event_id = memory.forget_message(session_id, message_id)
            memory.flush()
        return {"forgotten": session_id if message_id is None else message_id,
                "event_id": event_id}

    return server


@contextmanager
def told() -> Iterator[None]:
    """memq's refusal, as the tool's error: the model reads the message and can correct
    its call (the SDK shows any other exception as a bare "Error executing tool")."""
    try:
        yield
    except MemqError as exc:
        raise ToolError(str(exc)) from exc


def _fact(fact: Any) -> dict[str, Any]:
    return {"category": fact.category, "key": fact.key, "value": fact.value,
            "source": fact.source, "user_id": fact.user_id, "updated_at": fact.updated_at}


def serve(transport: Literal["stdio"] = "stdio", *, client: ToolsClient | None = None) -> None:
    """Serve the tools over stdio until stopped (the parent process's trust is the
    server's). HTTP is ``memq mcp --http``: there every request needs a bearer token, and
    a foreign ``Host`` or ``Origin`` is refused; this function serves no HTTP without them.
    """
    if transport != "stdio":
        raise ValidationError(
            f"serve({transport!r}): only 'stdio' here; over HTTP run `memq mcp --http`, "
            "which asks every request for a bearer token and checks its Host and Origin")
    build_server(client).run("stdio")
