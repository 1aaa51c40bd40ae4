"""Every adapter on a RemoteMemoryClient (``memq serve``): what an agent on another host
plugs into its framework."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest
from langchain_core.messages import AIMessage, HumanMessage, ToolMessage
from mcp import Client

from memq import RemoteMemoryClient
from memq.integrations.langchain import MemqChatMessageHistory
from memq.integrations.langgraph import MemqStore
from memq.integrations.mcp import build_server
from memq.integrations.openai_agents import MemqSession

pytestmark = pytest.mark.redis


def test_a_chat_history_through_memq_serve(remote: RemoteMemoryClient) -> None:
    history = MemqChatMessageHistory("r1", client=remote, user_id="alice")
    messages = [HumanMessage("Book Lisbon"),
                AIMessage("", tool_calls=[{"name": "book", "args": {"to": "LIS"}, "id": "c1"}]),
                ToolMessage("booked", tool_call_id="c1")]
    history.add_messages(messages)
    assert history.messages == messages
    history.clear()
    assert history.messages == []


def test_an_agents_session_through_memq_serve(remote: RemoteMemoryClient) -> None:
    session = MemqSession("r2", client=remote, in_thread=True)
    items: list[Any] = [{"role": "user", "content": "hi"},
                        {"type": "function_call", "call_id": "c1", "name": "f",
                         "arguments": "{}"},
                        {"type": "function_call_output", "call_id": "c1", "output": "42"}]

    async def run() -> tuple[list[Any], Any, list[Any]]:
        await session.add_items(items)
        got = await session.get_items()
        return got, await session.pop_item(), await session.get_items()

    assert asyncio.run(run()) == (items, items[2], items[:2])


def test_the_mcp_tools_through_memq_serve(remote: RemoteMemoryClient) -> None:
    async def run() -> list[Any]:
        async with Client(build_server(remote)) as tools:
            await tools.call_tool("remember", {"session_id": "r3", "content": "aisle seats",
                                               "user_id": "bob"})
            recalled = await tools.call_tool("recall", {"session_id": "r3"})
            facts = await tools.call_tool("facts", {"category": "prefs", "key": "seat",
                                                    "value": "aisle", "user_id": "bob"})
            return [recalled.structured_content, facts.structured_content]

    recalled, facts = asyncio.run(run())
    assert [i["content"] for i in recalled["result"]] == ["aisle seats"]
    assert [f["value"] for f in facts["result"]] == ["aisle"]


@pytest.mark.model
def test_a_langgraph_store_through_memq_serve(remote: RemoteMemoryClient) -> None:
    store = MemqStore(client=remote, user_id="carol")
    store.put(("memories",), "pet", {"text": "Her cat is called Miso."})
    store.put(("memories",), "food", {"text": "She is vegetarian."}, ttl=60)
    item = store.get(("memories",), "pet")
    assert item is not None
    assert item.value == {"text": "Her cat is called Miso."}
    hits = store.search(("memories",), query="the name of her cat")
    assert [h.key for h in hits] == ["pet", "food"]
    assert hits[0].score is not None  # the server embedded the text
    assert store.list_namespaces() == [("memories",)]
    store.delete(("memories",), "pet")
    assert store.get(("memories",), "pet") is None
    assert MemqStore(client=remote, user_id="dave").search(("memories",)) == []


@pytest.mark.parametrize(("call", "reason"), [
    (lambda r: r.put_document(("a.b",), "k", {}), "label with a '.'"),
    (lambda r: r.put_document(("a",), "k", ["x"]), "value must be a dict"),
    (lambda r: r.search_documents(("a",), filter={"n": {"$regex": "x"}}), "operator"),
    (lambda r: r.document("a", "k"), "namespace must be a tuple"),
])
def test_a_bad_document_call_gets_the_clients_own_reason(remote: RemoteMemoryClient,
                                                         call: Any, reason: str) -> None:
    from memq import ValidationError

    with pytest.raises(ValidationError, match=reason):
        call(remote)
