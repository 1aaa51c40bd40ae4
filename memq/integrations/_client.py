"""What the adapters need of a memq client, as protocols: a :class:`memq.MemoryClient` or
any object with the same methods (a remote client over HTTP) fits."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Protocol

if TYPE_CHECKING:
    from memq import (
        AsyncMemoryClient,
        AsyncRemoteMemoryClient,
        ContextItem,
        Document,
        Fact,
        FoundDocument,
        MemoryClient,
        Message,
        RemoteMemoryClient,
    )

MAX_PAGE = 10_000
"""The most messages one ``history`` call returns."""


class MessageClient(Protocol):
    """The methods a conversation adapter (a session, a chat history) calls."""

    def append(
        self, session_id: str, role: str, content: str, *, importance: float | None = None,
        tool_call_id: str | None = None, tool_name: str | None = None,
        tool_calls: list[Any] | None = None, created_at: str | None = None,
        user_id: str | None = None, agent_id: str | None = None,
    ) -> str: ...

    def history(
        self, session_id: str, limit: int = 50, *, before: str | None = None,
        after: str | None = None, summaries: bool = True,
    ) -> list[Message]: ...

    def flush(self, timeout: float = 10.0) -> None: ...

    def forget_session(self, session_id: str) -> str: ...

    def forget_message(self, session_id: str, message_id: str) -> str: ...


class AsyncMessageClient(Protocol):
    """:class:`MessageClient`'s methods, awaited (``AsyncMemoryClient``)."""

    async def append(
        self, session_id: str, role: str, content: str, *, importance: float | None = None,
        tool_call_id: str | None = None, tool_name: str | None = None,
        tool_calls: list[Any] | None = None, created_at: str | None = None,
        user_id: str | None = None, agent_id: str | None = None,
    ) -> str: ...

    async def history(
        self, session_id: str, limit: int = 50, *, before: str | None = None,
        after: str | None = None, summaries: bool = True,
    ) -> list[Message]: ...

    async def flush(self, timeout: float = 10.0) -> None: ...

    async def forget_session(self, session_id: str) -> str: ...

    async def forget_message(self, session_id: str, message_id: str) -> str: ...


def default_client() -> Any:
    """The client the ``memq`` commands of this directory would use."""
    from memq import MemoryClient  # loaded on use: the facade imports it lazily

    return MemoryClient.from_env()


def whole_history(client: MessageClient, session_id: str) -> list[Message]:
    """Every turn of a session, oldest first, read a page at a time (no consolidation
    summary: a framework gets back the messages it added)."""
    page = client.history(session_id, limit=MAX_PAGE, summaries=False)
    pages = [page]
    while len(page) == MAX_PAGE:
        page = client.history(session_id, limit=MAX_PAGE, before=page[0].id, summaries=False)
        pages.append(page)
    return [m for chunk in reversed(pages) for m in chunk]


if TYPE_CHECKING:

    def _a_memory_client_fits(client: MemoryClient) -> MessageClient:
        return client  # mypy checks here that MemoryClient has what the protocol says


class ToolsClient(MessageClient, Protocol):
    """What the MCP server's tools call, besides a conversation's methods."""

    def get_context(self, session_id: str, query: str | None = None,
                    scope: str = "session") -> list[ContextItem]: ...

    def facts(self, category: str | None = None, *, user_id: str | None = None) -> list[Fact]: ...

    def set_fact(self, category: str, key: str, value: str, source: str = "agent", *,
                 force: bool = False, user_id: str | None = None) -> str: ...

    def schedule_task(self, name: str, schedule: str, prompt: str, *, oneshot: bool = False,
                      trusted: bool = False, tz: str | None = None) -> str: ...


if TYPE_CHECKING:

    def _a_memory_client_has_the_tools(client: MemoryClient) -> ToolsClient:
        return client

    def _a_remote_client_has_the_tools(client: RemoteMemoryClient) -> ToolsClient:
        return client  # and so does the HTTP client of `memq serve`


class DocumentClient(Protocol):
    """What the LangGraph store calls: memq's documents (a local client's)."""

    def put_document(self, namespace: tuple[str, ...] | list[str], key: str,
                     value: dict[str, Any], *, text: str | None = None,
                     ttl_minutes: float | None = None, user_id: str | None = None) -> str: ...

    def delete_document(self, namespace: tuple[str, ...] | list[str], key: str, *,
                        user_id: str | None = None) -> str: ...

    def touch_document(self, namespace: tuple[str, ...] | list[str], key: str, *,
                       user_id: str | None = None) -> str: ...

    def document(self, namespace: tuple[str, ...] | list[str], key: str, *,
                 user_id: str | None = None) -> Document | None: ...

    def search_documents(
        self, prefix: tuple[str, ...] | list[str] = (), *, query: str | None = None,
        filter: dict[str, Any] | None = None, limit: int = 10, offset: int = 0,
        user_id: str | None = None,
    ) -> list[FoundDocument]: ...

    def document_namespaces(self, *, user_id: str | None = None) -> list[tuple[str, ...]]: ...

    def flush(self, timeout: float = 10.0) -> None: ...


if TYPE_CHECKING:

    def _a_memory_client_keeps_documents(client: MemoryClient) -> DocumentClient:
        return client

    def _a_remote_client_keeps_documents(client: RemoteMemoryClient) -> DocumentClient:
        return client

    def _an_async_client_fits(client: AsyncMemoryClient) -> AsyncMessageClient:
        return client

    def _an_async_remote_client_fits(client: AsyncRemoteMemoryClient) -> AsyncMessageClient:
        return client
