"""Hostile input through every public ``MemoryClient`` method: each call either raises the
exact memq error expected, naming the problem, with nothing sent, or (for odd but valid
text such as SQL) is stored and read back verbatim. Afterwards no event was set aside by
the writer, which still runs and commits a normal append."""

from __future__ import annotations

import datetime as dt
import math
from collections.abc import Iterator
from decimal import Decimal
from pathlib import Path
from typing import Any

import apsw
import orjson
import pytest

from memq import MemoryClient
from memq.config import Config, EmbedConfig
from memq.errors import NotFound, ScheduleError, ValidationError
from memq.testing import RedisServer, WriterThread
from memq.toolcalls import shrink_args
from tests.conftest import MODEL_DIR
from tests.faults import figures
from tests.faults.hostile import SQL_LOOKING, Case, bad_identifiers, deep_dict, deep_list

pytestmark = [pytest.mark.faults, pytest.mark.redis]

V = ValidationError


def identifier_cases() -> list[Case]:
    """Every text-identifier argument of the client, with every bad identifier."""
    slots: list[tuple[str, str, Any]] = [
        ("append", "session_id", lambda v: ((v, "user", "x"), {})),
        ("append", "tool_call_id", lambda v: (("s1", "tool", "x"), {"tool_call_id": v})),
        ("append", "tool_name", lambda v: (("s1", "tool", "x"), {"tool_name": v})),
        ("history", "session_id", lambda v: ((v,), {})),
        ("set_fact", "category", lambda v: ((v, "k", "value"), {})),
        ("set_fact", "key", lambda v: (("c", v, "value"), {})),
        ("delete_fact", "category", lambda v: ((v, "k"), {})),
        ("delete_fact", "key", lambda v: (("c", v), {})),
        ("facts", "category", lambda v: ((v,), {})),
        ("fact_history", "category", lambda v: ((v, "k"), {})),
        ("fact_history", "key", lambda v: (("c", v), {})),
        ("record_tool_call", "session_id", lambda v: ((v, "read_file", {}), {})),
        ("record_tool_call", "tool", lambda v: (("s1", v, {}), {})),
        ("suggest_next_tools", "tool", lambda v: ((v,), {})),
        ("schedule_task", "name", lambda v: ((v, "daily at 9am", "p"), {})),
        ("task", "task_id", lambda v: ((v,), {})),
        ("pause_task", "task_id", lambda v: ((v,), {})),
        ("resume_task", "task_id", lambda v: ((v,), {})),
        ("delete_task", "task_id", lambda v: ((v,), {})),
    ]
    optional = {"tool_call_id", "tool_name"}
    cases = []
    for method, what, build in slots:
        for label, value, fragment in bad_identifiers(what):
            if value is None and (what in optional or method == "facts"):
                continue  # None means "not given" there, which is valid
            args, kwargs = build(value)
            cases.append(Case(f"{what} {label}", method, args, kwargs, V, fragment))
    return cases


def append_cases() -> list[Case]:
    def case(label: str, error: type[Exception] | None, fragment: str, *args: Any,
             **kwargs: Any) -> Case:
        return Case(label, "append", args or ("s1", "user", "x"), kwargs, error, fragment)

    limit = "over the 65536 byte limit"
    return [
        case("role admin", V, "role must be one of assistant, system, tool, user, got 'admin'",
             "s1", "admin", "x"),
        case("role None", V, "role must be one of", "s1", None, "x"),
        case("role in capitals", V, "got 'USER'", "s1", "USER", "x"),
        case("role an int", V, "got 1", "s1", 1, "x"),
        case("role with NUL", V, "got 'user\\x00'", "s1", "user\x00", "x"),
        case("content None", V, "content must be a string, got NoneType", "s1", "user", None),
        case("content an int", V, "content must be a string, got int", "s1", "user", 7),
        case("content bytes", V, "content must be a string, got bytes", "s1", "user", b"x"),
        case("content a list", V, "content must be a string, got list", "s1", "user", ["x"]),
        case("content 1 byte too long", V, f"content is 65537 bytes, {limit}",
             "s1", "user", "x" * 65537),
        case("content too long in UTF-8 only", V, f"content is 80000 bytes, {limit}",
             "s1", "user", "é" * 40000),
        case("content of 10 MB", V, limit, "s1", "user", "x" * 10_000_000),
        case("content with NUL", V, "content contains a NUL character",
             "s1", "user", "a\x00b"),
        case("content with a lone surrogate", V,
             "payload.content contains a lone surrogate, which is not valid UTF-8",
             "s1", "user", "a\ud800b"),
        case("importance a string", V, "importance must be a number, got str", importance="high"),
        case("importance True", V, "importance must be a number, got bool", importance=True),
        case("importance a list", V, "importance must be a number, got list", importance=[0.5]),
        case("importance a Decimal", V, "importance must be a number, got Decimal",
             importance=Decimal("0.5")),
        case("importance below 0", V, "importance must be between 0.0 and 1.0, got -0.1",
             importance=-0.1),
        case("importance above 1", V, "between 0.0 and 1.0, got 1.5", importance=1.5),
        case("importance NaN", V, "between 0.0 and 1.0, got nan", importance=math.nan),
        case("importance infinite", V, "between 0.0 and 1.0, got inf", importance=math.inf),
        case("importance huge int", V, "between 0.0 and 1.0", importance=10**400),
        # Python refuses to print an int of more than 4,300 digits: the message must not try.
        case("importance of 5000 digits", V,
             "importance must be between 0.0 and 1.0, got an integer of 5001 digits",
             importance=10**5000),
        case("role of 5000 digits", V, "got an integer of 5001 digits", "s1", 10**5000, "x"),
        case("tool_calls a string", V, "tool_calls must be a list, got str", tool_calls="[]"),
        case("tool_calls a dict", V, "tool_calls must be a list, got dict", tool_calls={"a": 1}),
        case("tool_calls an object", V,
             "tool_calls cannot be stored as JSON: Type is not JSON serializable: object",
             tool_calls=[object()]),
        case("tool_calls nested 300 deep", V,
             "payload nests more than 64 levels of objects and lists",
             tool_calls=[deep_list(300)]),
        case("tool_calls nested 100000 deep", V, "payload nests more than 64 levels",
             tool_calls=[deep_list(100_000)]),
        case("tool_calls int key", V, "tool_calls cannot be stored as JSON: Dict key must be str",
             tool_calls=[{1: "a"}]),
        case("tool_calls 2**70", V, "Integer exceeds 64-bit range", tool_calls=[2**70]),
        case("tool_calls lone surrogate", V, "tool_calls cannot be stored as JSON: str is not "
             "valid UTF-8: surrogates not allowed", tool_calls=[{"a": "\ud800"}]),
        case("tool_calls of 1.2 MB", V, "bytes, over the 1048576 limit",
             tool_calls=["x"] * 300_000),
        case("created_at a word", V, "created_at must be an RFC3339 string, got 'yesterday'",
             created_at="yesterday"),
        case("created_at an int", V, "created_at must be an RFC3339 string, got 12345",
             created_at=12345),
        case("created_at naive text", V,
             "created_at has no time zone offset: '2026-01-01T00:00:00'",
             created_at="2026-01-01T00:00:00"),
        case("created_at naive datetime", V, "datetime 2026-01-01T00:00:00 has no time zone",
             created_at=dt.datetime(2026, 1, 1)),
        case("created_at month 13", V, "created_at is not RFC3339: '2026-13-01T00:00:00Z'",
             created_at="2026-13-01T00:00:00Z"),
        case("created_at with NUL", V, "created_at is not RFC3339",
             created_at="2026-01-01T00:00:00\x00Z"),
        case("created_at huge", V, "created_at must be an RFC3339 string",
             created_at="2" * 100_000),
        *[case(f"SQL-looking content {i}", None, "", "s1", "user", text)
          for i, text in enumerate(SQL_LOOKING)],
        *[case(f"SQL-looking session {i}", None, "", text, "user", "x")
          for i, text in enumerate(SQL_LOOKING)],
        case("emoji and escapes in content", None, "", "s1", "user", "🧠\t\n\r\x1b[31m red"),
        case("empty content", None, "", "s1", "user", ""),
        case("content exactly at the limit", None, "", "s1", "user", "x" * 65536),
    ]


def other_cases() -> list[Case]:
    limit_msg = "must be an integer from 1 to 10000, got"
    nf, se = NotFound, ScheduleError
    return [
        *[Case(f"limit {v!r:.20}", "history", ("s1",), {"limit": v}, V, f"limit {limit_msg}")
          for v in (0, -1, "10", 10.5, True, None, 10_001, 10**30)],
        Case("value None", "set_fact", ("c", "k", None), {}, V,
             "value must be a string, got NoneType"),
        Case("value an int", "set_fact", ("c", "k", 5), {}, V, "value must be a string, got int"),
        Case("value empty", "set_fact", ("c", "k", ""), {}, V,
             "value must not be empty (use delete_fact to remove a fact)"),
        Case("value blank", "set_fact", ("c", "k", "  \n"), {}, V, "value must not be empty"),
        Case("value too long", "set_fact", ("c", "k", "v" * 65537), {}, V,
             "value is 65537 bytes, over the 65536 byte limit"),
        Case("value with NUL", "set_fact", ("c", "k", "a\x00"), {}, V,
             "value contains a NUL character"),
        Case("value with a lone surrogate", "set_fact", ("c", "k", "\ud800"), {}, V,
             "payload.value contains a lone surrogate"),
        Case("source admin", "set_fact", ("c", "k", "v", "admin"), {}, V,
             "source must be one of agent, user, got 'admin'"),
        Case("source None", "set_fact", ("c", "k", "v", None), {}, V,
             "source must be one of agent, user, got None"),
        Case("force a string", "set_fact", ("c", "k", "v"), {"force": "yes"}, V,
             "force must be True or False, got 'yes'"),
        Case("force 1", "delete_fact", ("c", "k"), {"force": 1}, V,
             "force must be True or False, got 1"),
        Case("source system", "delete_fact", ("c", "k", "system"), {}, V,
             "source must be one of agent, user, got 'system'"),
        *[Case(f"SQL-looking value {i}", "set_fact", ("sql", f"k{i}", text), {}, None)
          for i, text in enumerate(SQL_LOOKING)],
        *[Case(f"SQL-looking key {i}", "set_fact", ("sql", text, "v"), {}, None)
          for i, text in enumerate(SQL_LOOKING)],
        Case("args a string", "record_tool_call", ("s1", "t", "a=1"), {}, V,
             "args must be a mapping, got str"),
        Case("args a list", "record_tool_call", ("s1", "t", [1]), {}, V,
             "args must be a mapping, got list"),
        Case("args int keys", "record_tool_call", ("s1", "t", {1: "a"}), {}, V,
             "args keys must be strings"),
        Case("args an object", "record_tool_call", ("s1", "t", {"a": object()}), {}, V,
             "args must be JSON-serialisable: Type is not JSON serializable: object"),
        Case("args 2**70", "record_tool_call", ("s1", "t", {"a": 2**70}), {}, V,
             "args must be JSON-serialisable: Integer exceeds 64-bit range"),
        Case("args lone surrogate", "record_tool_call", ("s1", "t", {"a": "\ud800"}), {}, V,
             "args must be JSON-serialisable: str is not valid UTF-8"),
        Case("args with 100k keys", "record_tool_call",
             ("s1", "t", {f"k{i}": i for i in range(100_000)}), {}, V,
             "bytes once shortened, over the 65536 limit"),
        Case("args nested 100000 deep", "record_tool_call", ("s1", "t", deep_dict(100_000)),
             {}, None),
        Case("args with 10 MB of text", "record_tool_call", ("s1", "t", {"a": "x" * 10**7}),
             {}, None),
        Case("args a string", "suggest_next_tools", ("t", "a=1"), {}, V,
             "args must be a mapping, got str"),
        Case("args nested 100000 deep", "suggest_next_tools", ("t", deep_dict(100_000)), {},
             None),
        *[Case(f"macro_id {v!r:.20}", "use_macro", (v,), {}, V,
               "macro_id must be a positive integer")
          for v in (0, -1, "1", 1.5, True, None, 2**63, 10**30)],
        Case("macro_id unknown", "use_macro", (123456,), {}, nf, "no macro 123456"),
        *[Case(label, "allow_prefix", (v,), {}, V, fragment) for label, v, fragment in (
            ("None", None, "prefix must be a string"),
            ("empty", "", "prefix is empty"),
            ("blank", "   ", "prefix is empty"),
            ("a command list", "ls; rm -rf /", "prefix contains a shell metacharacter ';'"),
            ("a substitution", "echo $(id)", "prefix contains a shell metacharacter '$'"),
            ("backticks", "echo `id`", "prefix contains a shell metacharacter '`'"),
            ("a pipe", "cat x | sh", "prefix contains a shell metacharacter '|'"),
            ("a redirect", "echo x > /etc/passwd", "shell metacharacter '>'"),
            ("a NUL", "git\x00status", "prefix contains a NUL character"),
            ("a newline", "git\nrm", "prefix contains a shell metacharacter '\\n'"),
            ("non-ASCII", "gït status", "prefix contains a non-ASCII character 'ï'"),
            ("a lone surrogate", "git\ud800", "prefix contains a non-ASCII character"),
            ("a shell keyword", "if true", "prefix starts with the shell keyword 'if'"),
            ("an assignment", "PATH=/tmp ls", "prefix starts with an environment assignment"),
            ("a glob", "rm *", "prefix contains an unsupported character '*'"),
            ("too long", "a" * 501, "prefix is 501 characters, over the 500 limit"),
        )],
        Case("never allowed", "revoke_prefix", ("never allowed",), {}, nf,
             "'never allowed' is not an allowed prefix"),
        Case("empty", "revoke_prefix", ("",), {}, V, "prefix is empty"),
        Case("an int", "revoke_prefix", (1,), {}, V, "prefix must be a string"),
        Case("command None", "is_command_allowed", (None,), {}, V,
             "command must be a string, got NoneType"),
        Case("command bytes", "is_command_allowed", (b"ls",), {}, V,
             "command must be a string, got bytes"),
        Case("trusted a string", "is_command_allowed", ("ls",), {"trusted": "yes"}, V,
             "trusted must be True or False, got 'yes'"),
        *[Case(f"not allowed: {text!r:.30}", "is_command_allowed", (text,), {}, None)
          for text in ("rm -rf /", "ls\x00; rm -rf /", "ls\ud800", "$(id)", "x" * 100_000)],
        *[Case(label, "schedule_task", args, kwargs, error, fragment)
          for label, args, kwargs, error, fragment in (
            ("schedule None", ("n", None, "p"), {}, V, "schedule must be a string, got NoneType"),
            ("schedule empty", ("n", "", "p"), {}, V, "schedule must not be empty"),
            ("schedule nonsense", ("n", "whenever", "p"), {}, se,
             "cannot understand schedule 'whenever'"),
            ("schedule too long", ("n", "every day " * 30, "p"), {}, se,
             "schedule text is longer than 200 characters"),
            ("schedule bad cron", ("n", "61 * * * *", "p"), {}, se, "61"),
            ("schedule 6-field cron", ("n", "* * * * * *", "p"), {}, se,
             "cron expression '* * * * * *' has 6 fields, expected 5"),
            ("schedule every 0 minutes", ("n", "every 0 minutes", "p"), {}, se,
             "N must be 1-59 minutes"),
            ("schedule in the past", ("n", "2001-01-01 at 9am", "p"), {}, se, "in the past"),
            ("schedule with NUL", ("n", "daily at 9am\x00", "p"), {}, se, "cannot understand"),
            ("prompt None", ("n", "daily at 9am", None), {}, V, "prompt must be a string"),
            ("prompt empty", ("n", "daily at 9am", ""), {}, V, "prompt must not be empty"),
            ("prompt too long", ("n", "daily at 9am", "p" * 65537), {}, V,
             "prompt is 65537 bytes, over the 65536 byte limit"),
            ("prompt with NUL", ("n", "daily at 9am", "p\x00"), {}, V,
             "prompt contains a NUL character"),
            ("prompt with a lone surrogate", ("n", "daily at 9am", "\udc80"), {}, V,
             "payload.prompt contains a lone surrogate"),
            ("oneshot a string", ("n", "daily at 9am", "p"), {"oneshot": "true"}, V,
             "oneshot must be True or False, got 'true'"),
            ("trusted 1", ("n", "daily at 9am", "p"), {"trusted": 1}, V,
             "trusted must be True or False, got 1"),
            ("oneshot with a repeating schedule", ("n", "daily at 9am", "p"),
             {"oneshot": True}, se, "oneshot=True needs a one-time schedule"),
            ("tz unknown", ("n", "daily at 9am", "p"), {"tz": "Mars/Olympus"}, se,
             "unknown time zone 'Mars/Olympus'"),
            ("tz a path", ("n", "daily at 9am", "p"), {"tz": "../../etc/passwd"}, se,
             "unknown time zone '../../etc/passwd'"),
            ("tz a directory", ("n", "daily at 9am", "p"), {"tz": "America"}, se,
             "unknown time zone 'America'"),
            ("tz with NUL", ("n", "daily at 9am", "p"), {"tz": "UTC\x00"}, se,
             "unknown time zone"),
            ("tz an int", ("n", "daily at 9am", "p"), {"tz": 5}, V, "tz must be a string"),
            ("tz empty", ("n", "daily at 9am", "p"), {"tz": ""}, V, "tz must not be empty"),
        )],
        *[Case(f"SQL-looking name and prompt {i}", "schedule_task",
               (text, "daily at 9am", text), {}, None) for i, text in enumerate(SQL_LOOKING)],
        *[Case("unknown id", method, ("no-such-task",), {}, nf, "no scheduled task 'no-such-task'")
          for method in ("task", "pause_task", "resume_task", "delete_task")],
    ]


CASES = identifier_cases() + append_cases() + other_cases()


class Stack:
    def __init__(self, config: Config) -> None:
        self.config = config
        self.writer = WriterThread(config)
        self.writer.start()
        self.client = MemoryClient(config=config)

    def rejected(self) -> int:
        conn = apsw.Connection(self.config.db_path, flags=apsw.SQLITE_OPEN_READONLY)
        try:
            return int(conn.execute("SELECT count(*) FROM rejected_events").fetchone()[0])
        finally:
            conn.close()


@pytest.fixture(scope="module")
def stack(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Stack]:
    directory = tmp_path_factory.mktemp("hostile-client")
    server = RedisServer(directory)
    server.start()
    running = Stack(Config(redis_url=server.url, db_path=str(Path(directory) / "memq.db"),
                           embed=EmbedConfig(model_dir=str(MODEL_DIR))))
    yield running
    running.client.close()
    running.writer.stop()
    server.stop()


@pytest.mark.parametrize("case", CASES, ids=[c.id for c in CASES])
def test_hostile_client_call(case: Case, stack: Stack) -> None:
    client = stack.client
    sent_before = client.outbox.last_sent
    if case.error is None:
        result = getattr(client, case.method)(*case.args, **case.kwargs)
        client.flush(30)
        read_back(client, case, result)
    else:
        with pytest.raises(case.error) as caught:
            getattr(client, case.method)(*case.args, **case.kwargs)
        assert type(caught.value) is case.error
        assert case.fragment in str(caught.value)
        assert client.outbox.last_sent == sent_before, "a refused call sent something"
    figures.add("bad_inputs")


def read_back(client: MemoryClient, case: Case, result: Any) -> None:
    """A valid odd input comes back exactly as it was given (or as memq documents it is
    kept), and reads with odd arguments return what they name and nothing else."""
    if case.method == "append":
        session, _, content = case.args
        assert (result, content) in [(m.id, m.content) for m in client.history(session, 10_000)]
    elif case.method == "set_fact":
        category, key, value = case.args
        assert (key, value) in [(f.key, f.value) for f in client.facts(category)]
    elif case.method == "schedule_task":
        task = client.task(result)
        assert (task.name, task.prompt) == (case.args[0], case.args[2])
    elif case.method == "is_command_allowed":
        assert result is False
    elif case.method == "record_tool_call":
        # Arguments are kept shortened (memq.toolcalls.shrink_args): deep or huge values
        # become their placeholder, and the event stays small.
        session, tool, args = case.args
        assert logged_payload(client, result) == {"tool": tool, "args": shrink_args(args)}
    elif case.method == "suggest_next_tools":
        tool, args = case.args
        assert result == client.suggest_next_tools(tool, shrink_args(args))
    elif case.method == "get_context":
        session = case.args[0]
        assert {item.session_id for item in result} <= {session}
        recent = [item.id for item in result if "recency" in item.branches]
        # The default profile's recency: the session's last 10 turns, whatever test (on
        # whichever process of a parallel run) appended them; none for an empty session.
        assert recent == [m.id for m in client.history(session, 10)]


def logged_payload(client: MemoryClient, event_id: str) -> Any:
    with client.readers.connection() as conn:
        row = conn.execute("SELECT payload FROM events WHERE event_id = ?",
                           (event_id,)).fetchone()
    assert row is not None, "the call's event is not in the log"
    return orjson.loads(row[0])


GET_CONTEXT_CASES = [
    *[Case(f"session_id {label}", "get_context", (value,), {}, V, fragment)
      for label, value, fragment in bad_identifiers("session_id")],
    Case("query an int", "get_context", ("s1",), {"query": 5}, V,
         "query must be a string or None, got int"),
    Case("query bytes", "get_context", ("s1",), {"query": b"q"}, V,
         "query must be a string or None, got bytes"),
    Case("query empty", "get_context", ("s1",), {"query": ""}, V,
         "query must not be blank; pass None to skip the semantic branch"),
    Case("query blank", "get_context", ("s1",), {"query": " \n"}, V, "query must not be blank"),
    Case("query too long", "get_context", ("s1",), {"query": "q" * 65537}, V,
         "query is 65537 bytes, over the 65536 byte limit"),
    Case("query of 10 MB", "get_context", ("s1",), {"query": "q" * 10_000_000}, V,
         "over the 65536 byte limit"),
    Case("query with a lone surrogate", "get_context", ("s1",), {"query": "a\ud800"}, V,
         "query contains a lone surrogate"),
    *[Case(f"SQL-looking query {i}", "get_context", ("s1",), {"query": text}, None)
      for i, text in enumerate(SQL_LOOKING)],
    *[Case(f"SQL-looking session {i}", "get_context", (text,), {}, None)
      for i, text in enumerate(SQL_LOOKING)],
]


@pytest.mark.parametrize("case", GET_CONTEXT_CASES, ids=[c.id for c in GET_CONTEXT_CASES])
def test_hostile_get_context(case: Case, stack: Stack) -> None:
    test_hostile_client_call(case, stack)


def test_after_all_that_the_writer_still_commits(stack: Stack) -> None:
    mid = stack.client.append("after", "user", "a normal turn")
    stack.client.flush(30)
    assert [m.id for m in stack.client.history("after")] == [mid]
    assert stack.writer.thread is not None
    assert stack.writer.thread.is_alive()
    assert stack.rejected() == 0  # nothing hostile got past the client to the writer
