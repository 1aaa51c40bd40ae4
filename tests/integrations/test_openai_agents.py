"""MemqSession against the real OpenAI Agents SDK (its scripted model stands in for the
remote LLM), a real writer and Redis: the SDK's own session behaviour, run on memq."""

from __future__ import annotations

import asyncio
import functools
import itertools
import types
from typing import TYPE_CHECKING, Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from memq import MemoryClient
from memq.config import Config
from memq.integrations.openai_agents import MemqSession
from tests.consolidation_events import send_summary

if TYPE_CHECKING:
    from agents import Agent
    from agents.memory import Session
    from agents.testing import ScriptedModel

pytestmark = pytest.mark.redis

SESSIONS = itertools.count()


@functools.cache
def sdk() -> types.SimpleNamespace:
    """The SDK, imported at first use: at the top of this file it cost every test process
    2.7 s of collection, whichever tests it ran."""
    import agents
    from agents import memory, testing

    agents.set_tracing_disabled(True)  # nothing to export traces to here

    @agents.function_tool
    def get_weather(city: str) -> str:
        """The weather in a city."""
        return f"Sunny and 21C in {city}"

    return types.SimpleNamespace(agents=agents, memory=memory, testing=testing,
                                 get_weather=get_weather)


def scripted() -> ScriptedModel:
    testing = sdk().testing
    return testing.ScriptedModel([  # type: ignore[no-any-return]
        [testing.function_call("get_weather", {"city": "Lisbon"}, call_id="call_1")],
        [testing.assistant_message("It is sunny in Lisbon.")],
        [testing.assistant_message("You asked about Lisbon.")],
    ])


async def run_agent(how: str, agent: Agent, text: str, session: Session) -> Any:
    """One turn, the way the SDK's own session tests run it: run, run_sync, run_streamed."""
    runner = sdk().agents.Runner
    if how == "run_sync":
        # A thread of its own: run_sync refuses to run inside an event loop.
        return await asyncio.to_thread(runner.run_sync, agent, text, session=session)
    if how == "run_streamed":
        streamed = runner.run_streamed(agent, text, session=session)
        async for _ in streamed.stream_events():
            pass
        return streamed
    return await runner.run(agent, text, session=session)


async def two_turns(session: Session, how: str = "run") -> tuple[ScriptedModel, list[Any]]:
    model = scripted()
    agent = sdk().agents.Agent(name="travel", model=model, tools=[sdk().get_weather])
    first = await run_agent(how, agent, "What is the weather in Lisbon?", session)
    assert first.final_output == "It is sunny in Lisbon."
    second = await run_agent(how, agent, "Which city did I ask about?", session)
    assert second.final_output == "You asked about Lisbon."
    return model, await session.get_items()


@pytest.mark.parametrize("how", ["run", "run_sync", "run_streamed"])
def test_an_agent_run_keeps_the_same_items_as_the_sdks_own_session(
        client: MemoryClient, how: str) -> None:
    model, items = asyncio.run(two_turns(MemqSession("s1", client=client), how))
    _, reference = asyncio.run(two_turns(sdk().agents.SQLiteSession("s1"), how))
    assert items == reference
    # The second turn's model call saw the first turn, tool call and output included.
    seen = model.calls[-1].input
    assert isinstance(seen, list)
    assert [i.get("type") for i in seen[:4]] == [None, "function_call",
                                                "function_call_output", "message"]


def test_memq_sees_the_items_as_turns(client: MemoryClient, config: Config) -> None:
    asyncio.run(two_turns(MemqSession("s1", client=client, user_id="alice")))
    client.flush()
    with MemoryClient(config=config) as other:
        turns = other.history("s1")
        assert [(t.role, t.content) for t in turns] == [
            ("user", "What is the weather in Lisbon?"),
            ("assistant", 'get_weather({"city":"Lisbon"})'),
            ("tool", "Sunny and 21C in Lisbon"),
            ("assistant", "It is sunny in Lisbon."),
            ("user", "Which city did I ask about?"),
            ("assistant", "You asked about Lisbon."),
        ]
        assert (turns[1].tool_call_id, turns[1].tool_name) == ("call_1", "get_weather")
        assert turns[2].tool_call_id == "call_1"
        assert turns[0].tool_calls is None  # a plain message is stored as plain text
        assert [s.session_id for s in other.sessions(user_id="alice")] == ["s1"]
        assert other.get_context("s1", scope="user")[0].content.startswith("What is")


def test_it_is_an_sdk_session(client: MemoryClient) -> None:
    assert isinstance(MemqSession("s1", client=client), sdk().memory.Session)


def test_add_get_limit_pop_and_clear_as_the_sdk_expects(client: MemoryClient) -> None:
    session = MemqSession("s1", client=client)
    other = MemqSession("s2", client=client)
    items: list[Any] = [{"role": "user", "content": f"Message {i}"} for i in range(4)]

    async def run() -> None:
        assert await session.pop_item() is None
        await session.add_items(items)
        await other.add_items([{"role": "user", "content": "elsewhere"}])
        assert await session.get_items() == items
        assert await session.get_items(limit=2) == items[2:]
        assert await session.get_items(limit=10) == items
        assert await session.get_items(limit=0) == []
        assert await session.pop_item() == items[3]
        assert await session.get_items() == items[:3]
        assert await session.pop_item() == items[2]
        await session.add_items([items[3]])
        assert await session.get_items() == [*items[:2], items[3]]
        await session.clear_session()
        assert await session.get_items() == []
        assert await other.get_items() == [{"role": "user", "content": "elsewhere"}]

    asyncio.run(run())


def test_consolidation_leaves_the_items_as_the_sdk_added_them(client: MemoryClient,
                                                               config: Config) -> None:
    """memq's summary of old turns is memq's: get_items, its limit and pop_item see the
    SDK's items alone."""
    session = MemqSession("s1", client=client)
    items: list[Any] = [{"role": "user", "content": f"Message {i}"} for i in range(4)]
    asyncio.run(session.add_items(items))
    client.flush()
    send_summary(config, "s1", [t.id for t in client.history("s1")][:3])
    assert "sum-1" in [t.id for t in client.history("s1")]

    async def run() -> tuple[list[Any], list[Any], Any, list[Any]]:
        return (await session.get_items(), await session.get_items(limit=4),
                await session.pop_item(), await session.get_items())

    assert asyncio.run(run()) == (items, items, items[3], items[:3])


def test_the_session_settings_limit(client: MemoryClient) -> None:
    limit = sdk().memory.SessionSettings(limit=3)
    session = MemqSession("s1", client=client, session_settings=limit)
    items: list[Any] = [{"role": "user", "content": f"Message {i}"} for i in range(5)]

    async def run() -> tuple[list[Any], list[Any]]:
        await session.add_items(items)
        return await session.get_items(), await session.get_items(limit=5)

    assert asyncio.run(run()) == (items[2:], items)


def test_pop_keeps_the_other_turns_times_and_tool_calls(client: MemoryClient) -> None:
    session = MemqSession("s1", client=client)
    asyncio.run(two_turns(session))
    client.flush()
    before = client.history("s1")
    popped = asyncio.run(session.pop_item())
    client.flush()
    after = client.history("s1")
    assert popped is not None
    assert popped["role"] == "assistant"  # type: ignore[typeddict-item]
    assert [(t.created_at, t.content, t.tool_calls) for t in after] == [
        (t.created_at, t.content, t.tool_calls) for t in before[:-1]]


def test_without_a_client_it_uses_the_environments(config: Config, writer: object,
                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("MEMQ_REDIS_URL", config.redis_url)
    monkeypatch.setenv("MEMQ_DB", config.db_path)
    session = MemqSession("s1")
    asyncio.run(session.add_items([{"role": "user", "content": "hi"}]))
    assert asyncio.run(session.get_items()) == [{"role": "user", "content": "hi"}]


def test_a_bad_session_id_is_refused_before_anything_is_sent(client: MemoryClient) -> None:
    from memq import ValidationError

    session = MemqSession("bad\nid", client=client)
    with pytest.raises(ValidationError, match="session_id"):
        asyncio.run(session.add_items([{"role": "user", "content": "x"}]))
    assert client.sessions() == []


JSON = st.recursive(
    st.none() | st.booleans() | st.integers(-(2**53), 2**53) | st.text(max_size=30),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=8), inner,
                                                                 max_size=3),
    max_leaves=8)
ITEMS = st.one_of(
    st.fixed_dictionaries({"role": st.sampled_from(["user", "assistant", "system",
                                                    "developer"]),
                           "content": st.text(max_size=100)}),
    st.fixed_dictionaries({"type": st.sampled_from(["function_call", "reasoning",
                                                    "custom_tool_call_output"]),
                           "call_id": st.from_regex(r"call_[a-z0-9]{1,8}", fullmatch=True)},
                          optional={"name": st.from_regex(r"[a-z_]{1,10}", fullmatch=True),
                                    "arguments": st.text(max_size=50), "output": JSON,
                                    "extra": JSON}),
)


@settings(max_examples=30, deadline=None, derandomize=True,
          suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(st.lists(ITEMS, min_size=1, max_size=4))
def test_any_item_round_trips(client: MemoryClient, items: list[Any]) -> None:
    session = MemqSession(f"h{next(SESSIONS)}", client=client)

    async def run() -> list[Any]:
        await session.add_items(items)
        return await session.get_items()

    assert asyncio.run(run()) == items


def test_an_async_client_is_awaited(config: Config, writer: object) -> None:
    from memq import AsyncMemoryClient

    async def run() -> tuple[list[Any], list[Any], Any, list[Any]]:
        client = AsyncMemoryClient(config=config)
        try:
            session = MemqSession("a1", client=client)
            _, items = await two_turns(session)
            _, reference = await two_turns(sdk().agents.SQLiteSession("a1"))
            popped = await session.pop_item()
            return items, reference, popped, await session.get_items()
        finally:
            await client.aclose()

    items, reference, popped, after = asyncio.run(run())
    assert items == reference
    assert (popped, after) == (items[-1], items[:-1])
