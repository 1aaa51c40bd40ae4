"""``memq mcp`` over stdio and streamable HTTP: started as a process, every tool called
through the MCP SDK's own client, against a real writer and Redis."""

from __future__ import annotations

import asyncio
import os
import socket
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import apsw
import httpx
import pytest

from memq import MemoryClient
from memq.authority import Role
from memq.config import Config
from memq.testing import free_port
from memq.tokens import Tokens
from tests.conftest import MODEL_DIR, ROOT, memq_command

pytestmark = [pytest.mark.redis, pytest.mark.model]

TOOLS = {"remember", "recall", "facts", "schedule", "forget"}


def store_args(config: Config) -> list[str]:
    return ["--db", config.db_path, "--redis-url", config.redis_url]


def environment() -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("MEMQ_")}
    return {**env, "MEMQ_EMBED_MODEL_DIR": str(MODEL_DIR), "OPENBLAS_NUM_THREADS": "1"}


async def use_every_tool(server: Any) -> dict[str, Any]:
    """Call each tool as a model would; returns what each answered."""
    from mcp import Client  # the SDK where used: at the top, 1.2 s of each test process's start

    async with Client(server, read_timeout_seconds=60) as mcp:
        listed = await mcp.list_tools()
        answers: dict[str, Any] = {"tools": {t.name: t.description for t in listed.tools}}

        async def call(tool: str, **arguments: Any) -> Any:
            result = await mcp.call_tool(tool, arguments)
            assert not result.is_error, (tool, result.content)
            return result.structured_content

        answers["remember"] = [await call(
            "remember", session_id="trip", content=text, user_id="alice", role=role)
            for role, text in (("user", "I always want a window seat on flights."),
                               ("assistant", "Noted: window seats from now on."))]
        answers["recall"] = await call("recall", session_id="trip", query="seat preference")
        answers["facts"] = await call("facts", category="preferences", key="seat",
                                      value="window", user_id="alice")
        answers["facts_listed"] = await call("facts", user_id="alice")
        answers["schedule"] = await call("schedule", name="checkin", when="in 2 hours",
                                         prompt="Remind alice to check in")
        slip = await call("remember", session_id="trip", content="my card ends in 4242")
        answers["forget_one"] = await call("forget", session_id="trip",
                                           message_id=slip["message_id"])
        answers["after_one"] = await call("recall", session_id="trip", query="card")
        answers["forget"] = await call("forget", session_id="trip")
        bad = await mcp.call_tool("remember", {"session_id": "bad\nid", "content": "x"})
        answers["bad"] = (bad.is_error, bad.content[0].text)  # type: ignore[union-attr]
    return answers


def check_answers(answers: dict[str, Any], config: Config) -> None:
    assert set(answers["tools"]) == TOOLS
    assert all(len(text) > 80 for text in answers["tools"].values())  # written for a model
    recalled = answers["recall"]["result"]
    assert [i["content"] for i in recalled] == ["I always want a window seat on flights.",
                                               "Noted: window seats from now on."]
    assert "recency" in recalled[0]["branches"]  # each item says why it is there
    assert [(f["key"], f["value"]) for f in answers["facts"]["result"]] == [("seat", "window")]
    assert answers["facts_listed"]["result"] == answers["facts"]["result"]
    assert answers["forget_one"]["forgotten"] != "trip"  # the turn's id
    assert "4242" not in str(answers["after_one"]["result"])
    assert len(answers["after_one"]["result"]) == 2  # the other turns stay
    assert answers["forget"]["forgotten"] == "trip"
    assert answers["bad"] == (True, "Error executing tool remember: session_id contains a "
                                    "control character")
    with MemoryClient(config=config) as memory:
        assert memory.history("trip") == []
        assert [t.id for t in memory.tasks()] == [answers["schedule"]["task_id"]]
        assert [f.value for f in memory.facts("preferences", user_id="alice")] == ["window"]


def test_every_tool_over_stdio(config: Config, writer: object) -> None:
    from mcp import StdioServerParameters

    command = memq_command("mcp", *store_args(config))
    server = StdioServerParameters(command=command[0], args=command[1:], env=environment(),
                                   cwd=str(ROOT))
    check_answers(asyncio.run(use_every_tool(server)), config)


@pytest.fixture
def http_server(config: Config, writer: object) -> Iterator[str]:
    port = free_port()
    proc = subprocess.Popen(
        memq_command("mcp", "--http", "--port", str(port), "--allow-host", "memq.internal",
                     *store_args(config)),
        env=environment(), cwd=ROOT, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    try:
        wait_listening(port, proc)
        yield f"http://127.0.0.1:{port}/mcp"
    finally:
        proc.terminate()
        proc.wait(30)


def wait_listening(port: int, proc: subprocess.Popen[bytes]) -> None:
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline and proc.poll() is None:
        with socket.socket() as sock:
            if sock.connect_ex(("127.0.0.1", port)) == 0:
                return
        time.sleep(0.05)
    pytest.fail(f"memq mcp --http did not listen (exit {proc.poll()})")


def with_token(url: str, token: str) -> Any:
    """The SDK's HTTP transport, sending ``token`` as a bearer token."""
    from mcp.client.streamable_http import streamable_http_client
    from mcp.shared._httpx_utils import create_mcp_http_client

    return streamable_http_client(url, http_client=create_mcp_http_client(
        headers={"Authorization": f"Bearer {token}"}))


def test_every_tool_over_streamable_http(http_server: str, config: Config) -> None:
    token = Tokens.in_directory(Path(config.db_path).resolve().parent).by_role[Role.AGENT]
    check_answers(asyncio.run(use_every_tool(with_token(http_server, token))), config)


def test_http_guards_its_door(http_server: str, config: Config) -> None:
    """No token, a wrong one, a foreign Host or a browser's other Origin is refused; an
    allowed host name is answered. (One server for all five: each costs a process.)"""
    hello = {"jsonrpc": "2.0", "id": 1, "method": "ping"}
    for auth in ({}, {"Authorization": "Bearer " + "x" * 43}, {"Authorization": "Basic x"}):
        answer = httpx.post(http_server, json=hello, headers=auth)
        assert answer.status_code == 401, auth
        assert answer.json()["title"] == "AuthenticationFailed"
        assert answer.headers["www-authenticate"].startswith("Bearer")
    rebound = httpx.post(http_server, json=hello, headers={"Host": "evil.example"})
    assert rebound.status_code == 421
    tokens = Tokens.in_directory(Path(config.db_path).resolve().parent).by_role
    answer = httpx.post(http_server, json=hello, headers={
        "Authorization": f"Bearer {tokens[Role.AGENT]}", "Origin": "https://evil.example"})
    assert answer.status_code == 403
    initialize = {"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
        "protocolVersion": "2025-06-18", "capabilities": {},
        "clientInfo": {"name": "t", "version": "1"}}}
    answer = httpx.post(http_server, json=initialize, headers={
        "Host": "memq.internal:8421", "Authorization": f"Bearer {tokens[Role.ADMIN]}",
        "Accept": "application/json, text/event-stream"})
    assert answer.status_code == 200, answer.text


def test_without_the_sdk_it_says_which_extra_to_install(config: Config) -> None:
    env = {**environment(), "PYTHONPATH": str(ROOT / "tests" / "integrations" / "no_mcp")}
    done = subprocess.run(memq_command("mcp", *store_args(config)), env=env, cwd=ROOT,
                          capture_output=True, text=True, timeout=60, check=False)
    assert (done.returncode, done.stderr.strip()) == (
        1, "memq: error: memq mcp needs the MCP SDK: pip install 'memq[mcp]'")


def test_http_refuses_to_start_without_its_tokens(config: Config) -> None:
    directory = Path(config.db_path).resolve().parent
    (directory / "agent.token").mkdir()  # unreadable as a token: nothing can authenticate
    done = subprocess.run(memq_command("mcp", "--http", "--port", str(free_port()),
                                       *store_args(config)),
                          env=environment(), cwd=ROOT, capture_output=True, text=True,
                          timeout=60, check=False)
    assert done.returncode == 1
    assert done.stderr.startswith("memq: error: cannot read ")
    assert "agent.token" in done.stderr


def test_the_public_serve_offers_no_unguarded_http() -> None:
    """HTTP without the bearer token and the Host/Origin checks was one call away."""
    from memq.errors import ValidationError
    from memq.integrations.mcp import serve

    with pytest.raises(ValidationError, match="memq mcp --http"):
        serve("http")  # type: ignore[arg-type]


def test_through_memq_serve_the_tools_stay_inside_a_keys_grant(
    config: Config, role_urls: dict[Role, str], writer: object, tmp_path: Path
) -> None:
    from mcp import StdioServerParameters

    from memq import RemoteMemoryClient
    from tests.producers.serving import serving

    with serving(config, role_urls, tmp_path) as served, \
            RemoteMemoryClient(served.url, token=served.token(Role.ADMIN)) as person:
        person.append("bob-chat", "user", "bob's secret plan", user_id="bob")
        key = person.create_key("assistant", users=["alice"], can=["read", "write", "forget"])
        person.flush()
        command = memq_command("mcp", "--server", served.url)
        server = StdioServerParameters(command=command[0], args=command[1:], cwd=str(ROOT),
                                       env={**environment(), "MEMQ_TOKEN": key.secret})
        answers = asyncio.run(_inside_and_outside(server))
        assert answers["remember"]["message_id"]
        assert [i["content"] for i in answers["recall"]["result"]] == ["a window seat"]
        for tool in ("recall bob", "forget bob", "facts of bob"):
            assert answers[tool][0], tool  # an error the model reads
            assert "no " in answers[tool][1], answers[tool]
        assert [m.content for m in person.history("bob-chat")] == ["bob's secret plan"]
        assert sorted(str(s.user_id) for s in person.sessions()) == ["alice", "bob"]


async def _inside_and_outside(server: Any) -> dict[str, Any]:
    from mcp import Client

    async with Client(server, read_timeout_seconds=60) as mcp:
        async def call(tool: str, **arguments: Any) -> Any:
            result = await mcp.call_tool(tool, arguments)
            if result.is_error:
                return (True, result.content[0].text)  # type: ignore[union-attr]
            return result.structured_content

        return {"remember": await call("remember", session_id="alice-trip",
                                       content="a window seat"),
                "recall": await call("recall", session_id="alice-trip"),
                "recall bob": await call("recall", session_id="bob-chat", query="plan"),
                "forget bob": await call("forget", session_id="bob-chat"),
                "facts of bob": await call("facts", user_id="bob")}


async def _call(server: Any, tool: str, **arguments: Any) -> tuple[bool, str]:
    from mcp import Client

    async with Client(server, read_timeout_seconds=60) as mcp:
        result = await mcp.call_tool(tool, arguments)
        return result.is_error, result.content[0].text  # type: ignore[union-attr]


def test_through_memq_serve_the_key_comes_from_the_environment(config: Config) -> None:
    done = subprocess.run(memq_command("mcp", "--server", "http://127.0.0.1:9"), cwd=ROOT,
                          env=environment(), capture_output=True, text=True, timeout=60,
                          check=False)
    assert done.returncode != 0
    assert "MEMQ_TOKEN" in done.stderr
    assert "Traceback" not in done.stderr


def test_over_http_a_keys_tool_calls_stay_inside_its_grant(http_server: str,
                                                           config: Config) -> None:
    """Each request's key decides: a call for another user's session is "no session",
    and the writer records the key of what the tools sent."""
    with MemoryClient(config=config) as person:
        person.append("bob-chat", "user", "bob's secret plan", user_id="bob")
        key = person.create_key("assistant", users=["alice"], can=["read", "write"])
        scribe = person.create_key("scribe", users=["alice"], can=["write"])
        person.flush()
    answers = asyncio.run(_inside_and_outside(with_token(http_server, key.secret)))
    # A key that may write but not read: the fact is set, and the model is told so (it
    # was told only "may not read", and would set it again).
    refused, told = asyncio.run(_call(with_token(http_server, scribe.secret), "facts",
                                      category="prefs", key="seat", value="aisle",
                                      user_id="alice"))
    assert refused
    assert "the fact was set; this key may not read" in told, told
    with MemoryClient(config=config) as person:
        assert [f.value for f in person.facts("prefs", user_id="alice")] == ["aisle"]
    assert [i["content"] for i in answers["recall"]["result"]] == ["a window seat"]
    for tool in ("recall bob", "forget bob", "facts of bob"):
        assert answers[tool][0], tool
    assert "no session 'bob-chat'" in answers["recall bob"][1]
    assert "may not forget" in answers["forget bob"][1]
    with MemoryClient(config=config) as person:
        assert [m.content for m in person.history("bob-chat")] == ["bob's secret plan"]
        (alice,) = [s for s in person.sessions() if s.session_id == "alice-trip"]
        assert alice.user_id == "alice"
    conn = apsw.Connection(config.db_path, flags=apsw.SQLITE_OPEN_READONLY)
    try:
        keys = {k for (k,) in conn.execute("SELECT key_id FROM event_keys")}
    finally:
        conn.close()
    assert keys == {key.id, scribe.id}



def test_over_http_a_keys_tool_calls_spend_its_budget(http_server: str,
                                                      config: Config) -> None:
    """As through memq serve: a place among the key's calls at once and a unit an
    operation, on the counters every server shares; past them a tool error saying when to
    retry, and nothing of the refused call written."""
    from memq.server.budgets import Budgets
    from memq.server.principals import KeyRing, keys_in

    remember = ("remember", {"session_id": "own1", "content": "refused", "user_id": "alice"})
    recall = ("recall", {"session_id": "alice-chat", "query": "x"})
    with MemoryClient(config=config) as person:
        person.append("alice-chat", "user", "a window seat", user_id="alice")
        # Four units: another server's one below, then a fact set (set, flush, list) at once.
        key = person.create_key("tight", users=["alice"], can=["read", "write"],
                                units_per_s=4, concurrent=1)
        person.flush()
        grant = KeyRing(keys_in(person.readers)).grant_of(key.secret)
        assert grant is not None
        other_server = Budgets.configured(person)
        with other_server.spend(grant, 1):  # its one place, on another server
            held = asyncio.run(_calls(with_token(http_server, key.secret), [
                remember, recall, _set_fact("seat", "aisle")]))
        other_server.give_back_idle(older_than=0.0)  # kept there no longer
        # The fact's flush also waits for anything the refused calls might have sent.
        flood = asyncio.run(_calls(with_token(http_server, key.secret),
                                   [_set_fact("meal", "veg"), *[recall] * 30]))
        assert person.history("own1") == []
    for refused, told in held:
        assert refused
        assert "already has as many calls running as it may; retry" in told, told
    assert not flood[0][0]
    assert [(f["key"], f["value"]) for f in flood[0][1]["result"]] == [("meal", "veg")]
    refusals = [told for refused, told in flood if refused]
    assert refusals  # four units a second: thirty reads in a row are not all let in
    assert all("over its budget of 4 units a second" in t and "retry in" in t
               for t in refusals), refusals
    assert "Traceback" not in str(refusals)


def _set_fact(key: str, value: str) -> tuple[str, dict[str, Any]]:
    return "facts", {"category": "prefs", "key": key, "value": value, "user_id": "alice"}


async def _calls(server: Any, calls: list[tuple[str, dict[str, Any]]]
                 ) -> list[tuple[bool, Any]]:
    """Each call in turn on one client: whether it was an error, and its text if so,
    else its answer."""
    from mcp import Client

    answers: list[tuple[bool, Any]] = []
    async with Client(server, read_timeout_seconds=60) as mcp:
        for tool, arguments in calls:
            result = await mcp.call_tool(tool, arguments)
            answers.append((True, result.content[0].text) if result.is_error  # type: ignore[union-attr]
                           else (False, result.structured_content))
    return answers


class _SpentByTheWrite:
    """A key's client whose budget the fact's write used up: the wait after it is refused."""

    def __init__(self) -> None:
        self.set: list[tuple[str, str, str]] = []

    def set_fact(self, category: str, key: str, value: str, **_: Any) -> None:
        self.set.append((category, key, value))

    def flush(self) -> None:
        from memq.errors import RateLimited

        raise RateLimited("this key is over its budget of 1 units a second (a write costs "
                          "one per event): retry in 0.90 s")


def test_a_fact_set_before_the_budget_ran_out_is_said_to_be_set() -> None:
    """Else the model reads only "over its budget", waits, and sets the fact again."""
    from memq.integrations.mcp import build_server

    memory = _SpentByTheWrite()
    (refused, told), = asyncio.run(_calls(build_server(memory), [  # type: ignore[arg-type]
        _set_fact("seat", "aisle")]))
    assert refused
    assert "the fact was set; this key is over its budget" in told, told
    assert memory.set == [("prefs", "seat", "aisle")]
