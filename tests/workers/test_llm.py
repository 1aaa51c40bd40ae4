"""The chat-completions summariser against a real local HTTP server started by the test."""

from __future__ import annotations

import socket
import time
from collections.abc import Iterator

import apsw
import orjson
import pytest

from memq import MemoryClient, names
from memq.config import Config, ConsolidationConfig, EmbedConfig, LLMConfig
from memq.errors import ConfigError, SummariserError
from memq.jobs import JSONJob, queue
from memq.store import rebuild
from memq.workers.consolidate import summariser_for
from memq.workers.llm import LLMSummariser
from memq.workers.summarise import ChunkMessage
from tests.workers.helpers import (
    ChatServer,
    append_turns,
    completion,
    request_pass,
    run_burst_worker,
)

TURNS = [
    "I moved to Lisbon in March 2021 and I work at Feedzai as a data engineer.",
    "Nice! Do you still play the cello on weekends with the orchestra?",
    "Yes, every Saturday morning; we are rehearsing Dvorak for a concert on 12 June.",
    "I'd love to come. Is it at the Gulbenkian auditorium like last year?",
]
MESSAGES = [ChunkMessage(f"m{i}", "user", text, "2024-02-01T10:00:00.000000Z")
            for i, text in enumerate(TURNS)]
GOOD = orjson.dumps({
    "summary": "User lives in Lisbon since March 2021 and plays cello on Saturdays.",
    "facts": [
        {"category": "person", "key": "city", "value": "Lisbon"},
        {"category": "person", "key": "employer"},  # malformed: left out
        "plays the cello",  # malformed: left out
        {"category": "hobby", "key": "instrument", "value": "cello"},
    ],
}).decode()


@pytest.fixture
def server() -> Iterator[ChatServer]:
    with ChatServer() as running:
        yield running


def summariser(server: ChatServer, timeout_s: float = 5.0, **env: str) -> LLMSummariser:
    config = LLMConfig(base_url=server.base_url, model="fast", timeout_s=timeout_s)
    return LLMSummariser(config, env=env)


def test_summary_and_facts_from_a_json_reply(server: ChatServer) -> None:
    server.reply = lambda body: completion(GOOD)
    summary = summariser(server, MEMQ_LLM_API_KEY="sk-test").summarise(MESSAGES)
    assert summary.text.startswith("User lives in Lisbon")
    assert [(f.category, f.key, f.value) for f in summary.facts] == [
        ("person", "city", "Lisbon"), ("hobby", "instrument", "cello")]
    [request] = server.requests
    assert request["path"] == "/v1/chat/completions"
    assert request["headers"]["Authorization"] == "Bearer sk-test"
    assert request["body"]["model"] == "fast"
    system, user = request["body"]["messages"]
    assert system["role"] == "system"
    assert "JSON" in system["content"]
    assert "[2024-02-01 10:00] user: I moved to Lisbon" in user["content"]


def test_no_key_in_the_environment_sends_no_authorization(server: ChatServer) -> None:
    summariser(server).summarise(MESSAGES)
    assert "Authorization" not in server.requests[0]["headers"]


@pytest.mark.parametrize(
    ("content", "text", "facts"),
    [
        ("User plays cello in Lisbon.", "User plays cello in Lisbon.", 0),  # not JSON
        (f"```json\n{GOOD}\n```", "User lives in Lisbon", 2),  # fenced JSON
        ('{"summary": "Cello in Lisbon.", "facts": "none"}', "Cello in Lisbon.", 0),
        ('{"summary": "Cello in Lisbon.", "facts": [1, 2]', '{"summary"', 0),  # broken JSON
    ],
    ids=["plain text", "fenced", "facts not a list", "broken json"],
)
def test_output_that_is_not_valid_json_for_facts_proposes_no_facts(
    server: ChatServer, content: str, text: str, facts: int
) -> None:
    server.reply = lambda body: completion(content)
    summary = summariser(server).summarise(MESSAGES)
    assert summary.text.startswith(text)
    assert len(summary.facts) == facts


@pytest.mark.parametrize(
    ("status", "body", "error"),
    [
        (200, b"<html>Bad gateway</html>", "answered something that is not JSON: '<html>Bad"),
        (200, b'{"error": "overloaded"}', "is not a chat completion"),
        (200, b'{"choices": []}', "is not a chat completion"),
        (200, orjson.dumps({"choices": [{"message": {"content": None}}]}),
         "without text content"),
        (200, completion('{"text": "no summary key"}')[1], 'without a "summary" text'),
        (500, b'{"error": "boom"}', "answered HTTP 500 Internal Server Error: '{\"error\""),
        (401, b"invalid api key", "answered HTTP 401 Unauthorized: 'invalid api key'"),
        (200, b"x" * (1024 * 1024 + 10), "answered more than 1048576 bytes"),
    ],
    ids=["html", "error json", "no choices", "null content", "no summary", "http 500",
         "http 401", "too large"],
)
def test_garbage_and_http_errors_are_clear_errors(
    server: ChatServer, status: int, body: bytes, error: str
) -> None:
    server.reply = lambda request: (status, body)
    with pytest.raises(SummariserError, match="the model") as caught:
        summariser(server).summarise(MESSAGES)
    assert error in str(caught.value)


def test_a_model_that_does_not_answer_in_time(server: ChatServer) -> None:
    server.hang()
    with pytest.raises(SummariserError, match=r"did not answer within 0\.3 s"):
        summariser(server, timeout_s=0.3).summarise(MESSAGES)


def test_an_endpoint_that_cannot_be_reached() -> None:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]  # bound, never listening: the connection is refused
        config = LLMConfig(base_url=f"http://127.0.0.1:{port}/v1", model="fast")
        with pytest.raises(SummariserError, match="cannot reach the model endpoint"):
            LLMSummariser(config).summarise(MESSAGES)


def test_llm_configuration_errors() -> None:
    with pytest.raises(ConfigError, match="both base_url and model"):
        summariser_for(LLMConfig(base_url="http://127.0.0.1:1/v1"), EmbedConfig(),
                       ConsolidationConfig())
    with pytest.raises(ConfigError, match="http"):
        LLMSummariser(LLMConfig(base_url="file:///etc/passwd", model="m"))


# -- through the whole pipeline -------------------------------------------------------


@pytest.fixture
def config(config: Config) -> Config:
    return config.replace(consolidation=ConsolidationConfig(min_chunk_chars=0))


def llm_config(config: Config, server: ChatServer) -> Config:
    """The worker's configuration: the writer's, plus the model endpoint."""
    return config.replace(llm=LLMConfig(base_url=server.base_url, model="fast", timeout_s=5.0))


def summaries(config: Config) -> list[tuple[str, str]]:
    conn = apsw.Connection(config.db_path, flags=apsw.SQLITE_OPEN_READONLY)
    return conn.execute("SELECT id, content FROM messages WHERE role = 'system'").fetchall()


def unconsolidated(config: Config) -> int:
    conn = apsw.Connection(config.db_path, flags=apsw.SQLITE_OPEN_READONLY)
    sql = "SELECT count(*) FROM messages WHERE consolidated_at IS NULL AND role != 'system'"
    return int(conn.execute(sql).fetchall()[0][0])


def wait_for_facts(client: MemoryClient, count: int) -> None:
    """The worker's events reach the writer after this client's own: poll, bounded."""
    for _ in range(200):
        if len(client.facts()) >= count:
            return
        time.sleep(0.05)


@pytest.mark.redis
def test_llm_summary_and_facts_reach_the_database(
    server: ChatServer, client: MemoryClient, config: Config
) -> None:
    config = llm_config(config, server)
    server.reply = lambda body: completion(GOOD)
    append_turns(client, "s", TURNS)
    assert request_pass(client) == {"chunks": 1, "enqueued": 1}
    run_burst_worker(config)
    [(_, content)] = summaries(config)
    assert content.startswith("Summary of 4 messages from ")
    assert content.endswith("User lives in Lisbon since March 2021 and plays cello on Saturdays.")
    conn = apsw.Connection(config.db_path, flags=apsw.SQLITE_OPEN_READONLY)
    [(payload,)] = conn.execute(
        "SELECT payload FROM events WHERE type = 'session.consolidated'").fetchall()
    assert orjson.loads(payload)["facts"] == [
        {"category": "person", "key": "city", "value": "Lisbon"},
        {"category": "hobby", "key": "instrument", "value": "cello"}]
    assert unconsolidated(config) == 0
    # The proposed facts become facts from an agent (sent right after the summary).
    wait_for_facts(client, 2)
    assert {(f.category, f.key, f.value, f.source) for f in client.facts()} == {
        ("person", "city", "Lisbon", "agent"), ("hobby", "instrument", "cello", "agent")}


@pytest.mark.redis
def test_proposed_facts_belong_to_the_sessions_user(
    server: ChatServer, client: MemoryClient, config: Config
) -> None:
    config = llm_config(config, server)
    server.reply = lambda body: completion(GOOD)
    append_turns(client, "s", TURNS, user_id="alice")
    assert request_pass(client) == {"chunks": 1, "enqueued": 1}
    [job] = queue(names.QUEUE_CONSOLIDATE, client.redis).get_jobs()
    assert job.kwargs["user_id"] == "alice"
    assert job.meta == {"session_id": "s", "message_ids": [m["id"] for m in
                                                           job.kwargs["messages"]]}
    run_burst_worker(config)
    for _ in range(200):
        if client.facts(user_id="alice"):
            break
        time.sleep(0.05)
    assert {(f.user_id, f.value) for f in client.facts(user_id="alice")} == {
        ("alice", "Lisbon"), ("alice", "cello")}
    assert client.facts() == []  # not global: another user never sees them


@pytest.mark.redis
def test_proposed_facts_never_overwrite_a_users_fact(
    server: ChatServer, client: MemoryClient, config: Config
) -> None:
    config = llm_config(config, server)
    server.reply = lambda body: completion(GOOD)
    client.set_fact("person", "city", "Porto", source="user")
    append_turns(client, "s", TURNS)
    assert request_pass(client) == {"chunks": 1, "enqueued": 1}
    run_burst_worker(config)
    wait_for_facts(client, 2)
    facts = {(f.category, f.key): (f.value, f.source) for f in client.facts()}
    assert facts[("person", "city")] == ("Porto", "user")
    assert facts[("hobby", "instrument")] == ("cello", "agent")
    history = client.fact_history("person", "city")
    assert [(h.value, h.source, h.applied) for h in history] == [
        ("Porto", "user", True), ("Lisbon", "agent", False)]


@pytest.mark.redis
@pytest.mark.parametrize(
    ("reply", "reason"),
    [
        (lambda body: (503, b"overloaded"), "HTTP 503"),
        (lambda body: completion("   "), "the summary is empty"),
        (lambda body: completion(" ".join(TURNS) * 2), "not fewer than its sources"),
    ],
    ids=["http error", "empty summary", "not shorter"],
)
def test_a_failed_job_leaves_the_messages_for_a_later_pass(
    server: ChatServer, client: MemoryClient, config: Config, reply: object, reason: str
) -> None:
    config = llm_config(config, server)
    server.reply = reply  # type: ignore[assignment]
    append_turns(client, "s", TURNS)
    request_pass(client)
    run_burst_worker(config)
    assert summaries(config) == []
    assert unconsolidated(config) == 4
    [job_id] = client.redis.zrange(f"rq:failed:{names.QUEUE_CONSOLIDATE}", 0, -1)
    job = JSONJob.fetch(job_id.decode(), connection=client.redis)
    assert reason in str(job.latest_result().exc_string)

    server.reply = lambda body: completion("They talked about Lisbon and the cello.")
    assert request_pass(client) == {"chunks": 1, "enqueued": 1}  # the failed job is replaced
    run_burst_worker(config)
    assert len(summaries(config)) == 1
    assert unconsolidated(config) == 0
    assert rebuild.check(config.db_path) == []
