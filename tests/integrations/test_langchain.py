"""MemqChatMessageHistory against the real langchain-core, a real writer and Redis."""

from __future__ import annotations

import asyncio
import itertools

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from langchain_core.messages import (
    AIMessage,
    BaseMessage,
    HumanMessage,
    SystemMessage,
    ToolMessage,
)

from memq import MemoryClient
from memq.config import Config
from memq.integrations.langchain import MemqChatMessageHistory, from_langchain, to_langchain
from tests.consolidation_events import send_summary

pytestmark = pytest.mark.redis

SESSIONS = itertools.count()

CONVERSATION: list[BaseMessage] = [
    SystemMessage("You are a travel assistant."),
    HumanMessage("Book me a window seat to Lisbon on March 5th."),
    AIMessage("", tool_calls=[{"name": "book_flight", "args": {"to": "LIS", "day": "03-05"},
                               "id": "call_1"}], id="run-1"),
    ToolMessage('{"seat": "14A", "status": "booked"}', tool_call_id="call_1"),
    AIMessage("Booked: seat 14A to Lisbon on March 5th.",
              response_metadata={"model_name": "m"}),
    HumanMessage(content=[{"type": "text", "text": "Thanks!"}], name="alice"),
]


def test_messages_come_back_equal_to_those_added(client: MemoryClient) -> None:
    history = MemqChatMessageHistory("s1", client=client)
    history.add_messages(CONVERSATION)
    assert history.messages == CONVERSATION  # before the writer commits them
    client.flush()
    assert history.messages == CONVERSATION


def test_consolidation_leaves_the_messages_as_they_were_added(client: MemoryClient,
                                                              config: Config) -> None:
    """memq's summary of old turns is memq's: the history shows the messages it added."""
    history = MemqChatMessageHistory("s1", client=client)
    history.add_messages(CONVERSATION)
    client.flush()
    send_summary(config, "s1", [t.id for t in client.history("s1")][1:4])
    assert "sum-1" in [t.id for t in client.history("s1")]
    assert history.messages == CONVERSATION


def test_another_process_reads_them_as_memq_turns(client: MemoryClient,
                                                  config: Config) -> None:
    MemqChatMessageHistory("s1", client=client, user_id="alice").add_messages(CONVERSATION)
    client.flush()
    with MemoryClient(config=config) as other:
        assert MemqChatMessageHistory("s1", client=other).messages == CONVERSATION
        turns = other.history("s1")
        assert [t.role for t in turns] == ["system", "user", "assistant", "tool", "assistant",
                                          "user"]
        # Search and consolidation see text: the tool call is named in it.
        assert turns[2].content == 'book_flight({"day": "03-05", "to": "LIS"})'
        assert turns[3].tool_call_id == "call_1"
        assert turns[5].content == "Thanks!"
        assert [s.session_id for s in other.sessions(user_id="alice")] == ["s1"]


def test_a_plain_message_is_stored_as_plain_text(client: MemoryClient) -> None:
    MemqChatMessageHistory("s1", client=client).add_user_message("hello there")
    client.flush()
    (turn,) = client.history("s1")
    assert (turn.role, turn.content, turn.tool_calls) == ("user", "hello there", None)


def test_turns_written_without_the_adapter_read_as_messages(client: MemoryClient) -> None:
    client.append("s1", "user", "hi")
    client.append("s1", "tool", "42", tool_call_id="c9")
    assert MemqChatMessageHistory("s1", client=client).messages == [
        HumanMessage("hi"), ToolMessage("42", tool_call_id="c9")]


def test_clear_forgets_the_session_and_it_can_start_again(client: MemoryClient) -> None:
    history = MemqChatMessageHistory("s1", client=client)
    history.add_messages(CONVERSATION)
    history.clear()
    assert history.messages == []
    assert client.history("s1") == []
    history.add_user_message("a new start")
    client.flush()
    assert history.messages == [HumanMessage("a new start")]


def test_the_async_methods(client: MemoryClient) -> None:
    history = MemqChatMessageHistory("s1", client=client)

    async def run() -> tuple[list[BaseMessage], list[BaseMessage]]:
        await history.aadd_messages(CONVERSATION[:2])
        before = await history.aget_messages()
        await history.aclear()
        return before, await history.aget_messages()

    assert asyncio.run(run()) == (CONVERSATION[:2], [])


def test_without_a_client_it_uses_the_environments(config: Config, writer: object,
                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("MEMQ_REDIS_URL", config.redis_url)
    monkeypatch.setenv("MEMQ_DB", config.db_path)
    history = MemqChatMessageHistory("s1")
    history.add_ai_message("from the environment")
    history.client.flush()
    with MemoryClient(config=config) as other:
        assert [m.content for m in other.history("s1")] == ["from the environment"]


def test_a_bad_session_id_is_refused_before_anything_is_sent(client: MemoryClient) -> None:
    from memq import ValidationError

    with pytest.raises(ValidationError, match="session_id"):
        MemqChatMessageHistory("bad\nid", client=client).add_user_message("x")
    assert client.sessions() == []


@settings(max_examples=25, deadline=None, derandomize=True,
          suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(st.lists(st.tuples(st.sampled_from([HumanMessage, AIMessage, SystemMessage]),
                          st.text(min_size=1, max_size=200)), min_size=1, max_size=4))
def test_any_text_round_trips(client: MemoryClient, turns: list[tuple[type, str]]) -> None:
    history = MemqChatMessageHistory(f"h{next(SESSIONS)}", client=client)
    messages = [kind(text) for kind, text in turns]
    history.add_messages(messages)
    assert history.messages == messages


_TEXT = st.text(max_size=40)
_OPTIONAL = {"id": st.text(min_size=1, max_size=8), "name": st.text(min_size=1, max_size=8),
             "additional_kwargs": st.dictionaries(st.text(max_size=5), _TEXT, max_size=2),
             "response_metadata": st.dictionaries(st.text(max_size=5), _TEXT, max_size=2)}
_CONTENT = st.one_of(_TEXT, st.lists(st.fixed_dictionaries(
    {"type": st.just("text"), "text": _TEXT}), max_size=2))


@st.composite
def _messages(draw: st.DrawFn) -> BaseMessage:
    kind = draw(st.sampled_from([HumanMessage, AIMessage, SystemMessage, ToolMessage]))
    fields = {name: draw(value) for name, value in _OPTIONAL.items() if draw(st.booleans())}
    if kind is ToolMessage:
        fields["tool_call_id"] = draw(st.text(max_size=8))
        if draw(st.booleans()):
            fields["status"] = draw(st.sampled_from(["success", "error"]))
    if kind is AIMessage and draw(st.booleans()):
        fields["tool_calls"] = [{"name": draw(st.text(min_size=1, max_size=8)),
                                 "args": draw(st.dictionaries(st.text(max_size=4), _TEXT,
                                                              max_size=2)),
                                 "id": draw(st.text(min_size=1, max_size=6))}]
    return kind(content=draw(_CONTENT), **fields)


@settings(max_examples=400, deadline=None)
@given(_messages())
def test_every_message_translates_back_to_itself(message: BaseMessage) -> None:
    # Pure translation, no Redis: the quick "plain" check must never call a message plain
    # that role and text alone would not give back.
    role, content, call_id, calls = from_langchain(message)
    assert to_langchain(role, content, call_id, calls) == message
