"""Learned tool chaining through the client, the inbox and the real writer."""

from __future__ import annotations

from typing import Any

import orjson
import pytest

from memq import MemoryClient, names
from memq.clock import now_rfc3339, uuid7
from memq.config import Config, MacrosConfig
from memq.errors import ConfigError, NotFound, ValidationError
from memq.producers.macros import _best_per_next_tool
from memq.store.read.macros import Macro
from memq.store.rebuild import check
from memq.testing import inbox_entries, wait_committed
from memq.toolcalls import ANY_ARGS

pytestmark = pytest.mark.redis


def record_sessions(client: MemoryClient, count: int = 4) -> None:
    """Agents fixing one file each: status, diff, read, edit, test, commit."""
    with client.batched():
        for n in range(count):
            session, path = f"fix-{n}", f"src/pkg/mod{n}.py"
            client.record_tool_call(session, "terminal", {"command": "git status"})
            client.record_tool_call(session, "terminal", {"command": "git diff"})
            client.record_tool_call(session, "read_file", {"path": path})
            client.record_tool_call(session, "edit_file",
                                    {"path": path, "old": "x = 1", "new": "x = 2"})
            client.record_tool_call(session, "terminal", {"command": f"pytest {path}"})
            client.record_tool_call(session, "terminal", {"command": f"git commit -m 'fix {n}'"})
    client.flush()


@pytest.mark.remote_too
def test_suggests_editing_the_file_just_read(client: MemoryClient, config: Config) -> None:
    record_sessions(client)
    suggestions = client.suggest_next_tools("read_file", {"path": "lib/other.py"})
    assert [s.tool for s in suggestions] == ["edit_file"]
    best = suggestions[0]
    # The path is this call's own; what other sessions wrote is only shown by its shape.
    assert best.args == {"path": "lib/other.py", "old": "x = <num>", "new": "x = <num>"}
    assert best.confidence == pytest.approx((4 + 1) / (4 + 4))
    assert (best.count, best.used_count) == (4, 0)
    assert best.pattern == '{"path":"<path>"}'
    assert check(config.db_path) == []


@pytest.mark.remote_too
def test_suggests_git_diff_after_git_status(client: MemoryClient) -> None:
    record_sessions(client)
    [after_status] = client.suggest_next_tools("terminal", {"command": "git status"})
    assert (after_status.tool, after_status.args) == ("terminal", {"command": "git diff"})
    # After pytest on any path the agent commits, whatever the path was.
    [after_tests] = client.suggest_next_tools("terminal", {"command": "pytest tests/a_test.py"})
    assert after_tests.tool == "terminal"
    assert after_tests.args["command"].startswith("git commit -m ")


@pytest.mark.remote_too
def test_unknown_arguments_fall_back_to_the_tool(client: MemoryClient) -> None:
    record_sessions(client)
    # Never seen with these arguments: the tool-level macro answers (terminal → terminal
    # in 8 of the 12 transitions out of terminal).
    [suggestion] = client.suggest_next_tools("terminal", {"command": "make lint", "cwd": "/x"})
    assert (suggestion.tool, suggestion.pattern) == ("terminal", ANY_ARGS)
    assert suggestion.confidence == pytest.approx((8 + 1) / (12 + 4))
    assert client.suggest_next_tools("never_called") == []


def suggested(client: MemoryClient, tool: str, args: dict[str, Any]) -> list[tuple[str, str]]:
    return [(s.tool, s.pattern) for s in client.suggest_next_tools(tool, args)]


def test_threshold_and_limit_come_from_the_config(config: Config, writer: Any) -> None:
    diff = '{"command":"git diff"}'
    with MemoryClient(config=config.replace(macros=MacrosConfig(min_confidence=0.6))) as client:
        record_sessions(client)
        assert suggested(client, "read_file", {"path": "a.py"}) == [
            ("edit_file", '{"path":"<path>"}')]                              # 0.625
        assert suggested(client, "terminal", {"command": "make"}) == []    # 0.5625 < 0.6
    everything = MacrosConfig(min_confidence=0.0, suggest_limit=5)
    with MemoryClient(config=config.replace(macros=everything)) as client:
        assert suggested(client, "terminal", {}) == [
            ("terminal", ANY_ARGS), ("read_file", ANY_ARGS)]                 # best first
        # Each next tool once: the specific row for read_file (0.625 beats 0.3125).
        assert suggested(client, "terminal", {"command": "git diff"}) == [
            ("read_file", diff), ("terminal", ANY_ARGS)]
    one = MacrosConfig(min_confidence=0.0, suggest_limit=1)
    with MemoryClient(config=config.replace(macros=one)) as client:
        assert suggested(client, "terminal", {}) == [("terminal", ANY_ARGS)]


@pytest.mark.remote_too
def test_one_accident_is_not_a_suggestion(client: MemoryClient) -> None:
    client.record_tool_call("s", "grep", {"pattern": "TODO"})
    client.record_tool_call("s", "open_browser", {})
    client.flush()
    assert client.suggest_next_tools("grep", {"pattern": "TODO"}) == []  # 0.4 < 0.5


@pytest.mark.remote_too
def test_use_macro_counts(client: MemoryClient) -> None:
    record_sessions(client)
    [suggestion] = client.suggest_next_tools("read_file", {"path": "a.py"})
    client.use_macro(suggestion.macro_id)
    client.use_macro(suggestion.macro_id)
    client.flush()
    [again] = client.suggest_next_tools("read_file", {"path": "a.py"})
    assert again.used_count == 2
    with pytest.raises(NotFound, match="no macro 999"):
        client.use_macro(999)


def test_long_text_is_not_sent(client: MemoryClient, config: Config) -> None:
    client.record_tool_call("s", "write_file", {"path": "a.py", "content": "x" * 100_000})
    client.flush()
    with client.readers.connection() as conn:
        [(payload,)] = conn.execute("SELECT payload FROM events").fetchall()
    assert orjson.loads(payload)["args"] == {"path": "a.py", "content": "<text>"}


class Unserialisable:
    pass


BAD_CALLS: list[tuple[str, tuple[Any, ...], str]] = [
    ("record_tool_call", ("", "t", {}), "session_id must not be empty"),
    ("record_tool_call", (5, "t", {}), "session_id must be a string, got int"),
    ("record_tool_call", ("s" * 201, "t", {}), "session_id is 201 characters, over the 200"),
    ("record_tool_call", ("s", None, {}), "tool must be a string, got NoneType"),
    ("record_tool_call", ("s", "  ", {}), "tool must not be empty"),
    ("record_tool_call", ("s", "t\n", {}), "tool contains a control character"),
    ("record_tool_call", ("s", "t", ["a"]), "args must be a mapping, got list"),
    ("record_tool_call", ("s", "t", "git status"), "args must be a mapping, got str"),
    ("record_tool_call", ("s", "t", {1: "a"}), "args keys must be strings"),
    ("record_tool_call", ("s", "t", {"x": Unserialisable()}), "args must be JSON-serialisable"),
    ("record_tool_call", ("s", "t", {"x": {1: 2}}), "args must be JSON-serialisable"),
    ("record_tool_call", ("s", "t", {"x": 2**70}), "args must be JSON-serialisable"),
    ("record_tool_call", ("s", "t", {f"k{i}": "v" * 100 for i in range(1000)}),
     "bytes once shortened, over the 65536 limit"),
    ("suggest_next_tools", ("",), "tool must not be empty"),
    ("suggest_next_tools", ("t", 3), "args must be a mapping, got int"),
    ("use_macro", (0,), "macro_id must be a positive integer, got 0"),
    ("use_macro", (True,), "macro_id must be a positive integer, got True"),
    ("use_macro", ("1",), "macro_id must be a positive integer, got '1'"),
    ("use_macro", (1.0,), "macro_id must be a positive integer, got 1.0"),
]


@pytest.mark.parametrize(("method", "args", "message"), BAD_CALLS,
                         ids=[f"{m}-{msg[:30]}" for m, _, msg in BAD_CALLS])
def test_bad_arguments(idle_client: MemoryClient, method: str, args: tuple[Any, ...],
                       message: str) -> None:
    with pytest.raises(ValidationError) as caught:
        getattr(idle_client, method)(*args)
    assert message in str(caught.value)
    assert inbox_entries(idle_client.redis) == 0
    assert idle_client.outbox.last_sent is None


@pytest.mark.parametrize(
    ("settings", "message"),
    [({"min_confidence": 1.5}, "min_confidence must be between 0.0 and 1.0, got 1.5"),
     ({"suggest_limit": 0}, "suggest_limit must be at least 1, got 0")],
)
def test_bad_macro_settings(settings: dict[str, Any], message: str) -> None:
    with pytest.raises(ConfigError, match=message):
        MacrosConfig(**settings)


TOKEN = "Bearer sk-live-7fQ2mZ9xKp4LwR8vT1nY"
"""What the outside probe recorded in one session and was then suggested in all of them."""


def macro_tables_text(client: MemoryClient) -> str:
    with client.readers.connection() as conn:
        rows = [conn.execute(f"SELECT * FROM {table}").fetchall()
                for table in ("macros", "macro_next_args", "macro_last_calls")]
    return repr(rows)


def test_a_token_recorded_by_one_session_is_suggested_to_no_other(
    client: MemoryClient, config: Config
) -> None:
    for n in range(4):  # enough for the transition to be suggested
        client.record_tool_call(f"victim-{n}", "login", {"user": "ann"})
        client.record_tool_call(f"victim-{n}", "http_get", {
            "url": "https://api.example.org/me", "headers": {"Authorization": TOKEN}})
    client.flush()
    [suggestion] = client.suggest_next_tools("login", {"user": "mallory"})
    assert suggestion.tool == "http_get"
    assert suggestion.args == {"url": "<url>", "headers": {"Authorization": "<secret>"}}
    # Not suggested, and not kept either: the client never sent it.
    with client.readers.connection() as conn:
        payloads = " ".join(p for (p,) in conn.execute("SELECT payload FROM events"))
    assert "sk-live" not in payloads
    assert "sk-live" not in macro_tables_text(client)
    assert check(config.db_path) == []


def test_a_token_sent_around_the_client_is_not_kept_in_a_macro(
    client: MemoryClient, config: Config
) -> None:
    def observed(session: str, tool: str, args: dict[str, Any]) -> bytes:
        return orjson.dumps({"id": uuid7(), "type": "macro.observed", "v": 1,
                             "session_id": session, "created_at": now_rfc3339(),
                             "payload": {"tool": tool, "args": args}})

    entries = [observed(f"raw-{n}", tool, args) for n in range(4) for tool, args in (
        ("login", {"password": "hunter2-hunter2"}),
        ("http_get", {"headers": {"Authorization": TOKEN}, "q": f"curl -u ann:{TOKEN[7:]}"}))]
    for raw in entries:
        client.redis.xadd(names.INBOX_STREAM, {names.EVENT_FIELD: raw})
    wait_committed(client.redis)
    # The shared, learned rows never hold the values. (Each session's own last call stays
    # in macro_last_calls, as in the log, for its references; it goes with the session.)
    with client.readers.connection() as conn:
        shared = repr(conn.execute("SELECT * FROM macros").fetchall()
                      + conn.execute("SELECT * FROM macro_next_args").fetchall())
    assert "<secret>" in shared
    for secret in ("hunter2", "sk-live", TOKEN[7:]):
        assert secret not in shared
    [suggestion] = client.suggest_next_tools("login", {"password": "mine"})
    assert suggestion.args["headers"] == {"Authorization": "<secret>"}


def test_on_a_full_tie_the_older_macro_is_suggested_first() -> None:
    # Ids are hashes of the transitions, so they no longer say which macro came first.
    def learned(next_tool: str, macro_id: int, created_at: str) -> Macro:
        return Macro(macro_id, "read_file", ANY_ARGS, next_tool, None, 0.5, 0, 3, 5,
                     created_at, created_at)

    newer = learned("edit_file", 1, "2026-03-02T00:00:00.000000Z")
    older = learned("grep", 2**52, "2026-03-01T00:00:00.000000Z")
    assert [m.next_tool for m in _best_per_next_tool([newer, older])] == ["grep", "edit_file"]
