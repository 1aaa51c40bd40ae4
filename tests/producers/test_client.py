"""MemoryClient.append / flush / history: validation, defaults, and errors."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta, timezone
from pathlib import Path
from typing import Any

import pytest
import redis

from memq import MemoryClient, names
from memq.config import ClientConfig, Config
from memq.errors import BrokerError, FlushTimeout, NotFound, ValidationError
from memq.testing import inbox_entries
from tests.consolidation_events import send_summary

pytestmark = pytest.mark.redis

BAD_APPENDS: list[tuple[dict[str, Any], str]] = [
    ({"role": "robot"}, "role must be one of assistant, system, tool, user, got 'robot'"),
    ({"role": None}, "role must be one of"),
    ({"role": ["user"]}, "role must be one of"),
    ({"content": None}, "content must be a string, got NoneType"),
    ({"content": b"bytes"}, "content must be a string, got bytes"),
    ({"content": "x" * (64 * 1024 + 1)}, "over the 65536 byte limit"),
    ({"content": "nul\x00byte"}, "contains a NUL character"),
    ({"importance": float("nan")}, "importance must be between 0.0 and 1.0, got nan"),
    ({"importance": 1.01}, "importance must be between 0.0 and 1.0, got 1.01"),
    ({"importance": -1}, "importance must be between 0.0 and 1.0"),
    ({"importance": True}, "importance must be a number, got bool"),
    ({"importance": "0.5"}, "importance must be a number, got str"),
    ({"tool_calls": {"name": "ls"}}, "tool_calls must be a list, got dict"),
    ({"tool_calls": [object()]}, "tool_calls cannot be stored as JSON"),
    ({"tool_call_id": ""}, "tool_call_id must not be empty"),
    ({"tool_name": 3}, "tool_name must be a string, got int"),
    ({"created_at": datetime(2026, 1, 1)}, "has no time zone"),
    ({"created_at": "2026-01-01 10:00"}, "created_at has no time zone offset"),
    ({"created_at": "last tuesday"}, "created_at is not RFC3339"),
    ({"session_id": ""}, "session_id must not be empty"),
    ({"session_id": "s" * 201}, "session_id is 201 characters, over the 200 limit"),
    ({"session_id": "a\tb"}, "session_id contains a control character"),
    ({"session_id": 42}, "session_id must be a string, got int"),
    ({"user_id": ""}, "user_id must not be empty"),
    ({"user_id": "u\x00"}, "user_id contains a control character"),
    ({"user_id": 7}, "user_id must be a string, got int"),
    ({"user_id": "u" * 201}, "user_id is 201 characters, over the 200 limit"),
    ({"agent_id": " "}, "agent_id must not be empty"),
    ({"agent_id": ["a"]}, "agent_id must be a string, got list"),
]


@pytest.mark.parametrize(("changes", "message"), BAD_APPENDS, ids=[m for _, m in BAD_APPENDS])
def test_bad_append_raises_and_sends_nothing(
    config: Config, changes: dict[str, Any], message: str
) -> None:
    args: dict[str, Any] = {"session_id": "s1", "role": "user", "content": "hi", **changes}
    with MemoryClient(config=config) as client:
        with pytest.raises(ValidationError) as info:
            client.append(args.pop("session_id"), args.pop("role"), args.pop("content"), **args)
        assert message in str(info.value)
        assert inbox_entries(client.redis) == 0


@pytest.mark.remote_too
def test_defaults_and_created_at(client: MemoryClient) -> None:
    for role in ("user", "assistant", "tool", "system"):
        client.append("s1", role, f"from {role}")
    moment = datetime(2024, 5, 1, 12, 0, tzinfo=timezone(timedelta(hours=-5)))
    client.append("s2", "user", "imported", created_at=moment, importance=0.95)
    client.append("s2", "user", "as text", created_at="2024-05-01T18:00:00+01:00")
    client.flush()
    assert [m.importance for m in client.history("s1")] == [0.5, 0.5, 0.3, 0.1]
    older = client.history("s2")
    assert [m.created_at for m in older] == ["2024-05-01T17:00:00.000000Z",
                                             "2024-05-01T17:00:00.000000Z"]
    assert older[0].importance == 0.95


def test_a_time_from_the_future_is_refused_where_it_is_given(client: MemoryClient) -> None:
    """The writer would set it aside (it would stay the session's newest turn forever):
    the caller hears why at once, and nothing is sent."""
    for ahead in (timedelta(days=365 * 7000), timedelta(hours=1)):
        with pytest.raises(ValidationError, match="is ahead of this clock by more than"):
            client.append("s", "user", "later", created_at=datetime.now(UTC) + ahead)
    client.append("s", "user", "now-ish", created_at=datetime.now(UTC) + timedelta(minutes=1))
    client.flush()
    assert [m.content for m in client.history("s")] == ["now-ish"]


@pytest.mark.remote_too
def test_tool_fields_round_trip(client: MemoryClient) -> None:
    calls = [{"id": "c1", "function": {"name": "ls", "arguments": "{\"path\": \"/\"}"}}]
    client.append("s", "assistant", "", tool_calls=calls)
    client.append("s", "tool", "a.txt", tool_call_id="c1", tool_name="ls")
    client.flush()
    first, second = client.history("s")
    assert first.tool_calls == calls
    assert (second.tool_call_id, second.tool_name) == ("c1", "ls")


@pytest.mark.remote_too
def test_history_limit_and_order(client: MemoryClient) -> None:
    ids = [client.append("s", "user", str(i)) for i in range(20)]
    client.flush()
    assert [m.id for m in client.history("s", limit=5)] == ids[-5:]
    for bad in (0, -1, 10_001, 2.5, True):
        with pytest.raises(ValidationError, match="limit must be an integer"):
            client.history("s", limit=bad)  # type: ignore[arg-type]


def test_flush_times_out_without_a_writer(config: Config) -> None:
    with MemoryClient(config=config) as client:
        client.flush(timeout=0.01)  # nothing sent: returns at once
        client.append("s", "user", "nobody is listening")
        with pytest.raises(FlushTimeout, match="is `memq writer` running"):
            client.flush(timeout=0.2)


def test_unreachable_redis_is_a_broker_error(config: Config) -> None:
    from memq.testing import free_port

    # No retrying: how long a send waits out a restart is tested in tests/faults.
    dead = config.replace(redis_url=f"redis://:hunter2@127.0.0.1:{free_port()}/0",
                          client=ClientConfig(retry_for_s=0))
    with MemoryClient(config=dead) as client, pytest.raises(BrokerError) as info:
        client.append("s", "user", "hello")
    assert "sending an event failed" in str(info.value)
    assert "hunter2" not in str(info.value)


def test_batched_sends_everything(client: MemoryClient) -> None:
    with client.batched():
        for i in range(1234):
            client.append("bulk", "user", f"m{i}")
    client.flush()
    assert len(client.history("bulk", limit=2000)) == 1234


def test_from_env(config: Config, monkeypatch: pytest.MonkeyPatch, writer: object) -> None:
    monkeypatch.setenv("MEMQ_REDIS_URL", config.redis_url)
    monkeypatch.setenv("MEMQ_DB", config.db_path)
    with MemoryClient.from_env() as client:
        client.append("env", "user", "hello")
        client.flush()
        assert [m.content for m in client.history("env")] == ["hello"]
        stream = client.outbox.stream
    assert redis.Redis.from_url(config.redis_url).get(names.COMMITTED_KEYS[stream]) is not None


def test_history_pages_through_a_session_of_any_length(client: MemoryClient) -> None:
    same_time = "2026-01-01T10:00:00Z"  # an import: many turns share one timestamp
    with client.batched():
        ids = [client.append("long", "user", f"turn {i}",
                             created_at=same_time if i < 12 else None) for i in range(25)]
    client.flush()
    assert [m.id for m in client.history("long", 10)] == ids[15:]
    pages, page = [], client.history("long", 10)
    while page:
        pages.insert(0, page)
        page = client.history("long", 10, before=page[0].id)
    assert [m.id for p in pages for m in p] == ids
    assert [len(p) for p in pages] == [5, 10, 10]
    # Forwards: what came after a message, a page at a time.
    assert [m.id for m in client.history("long", 7, after=ids[3])] == ids[4:11]
    assert client.history("long", 7, after=ids[-1]) == []


@pytest.mark.parametrize(("kwargs", "error", "message"), [
    ({"before": "no-such-id"}, NotFound, "no message 'no-such-id' in session 'long'"),
    ({"after": "no-such-id"}, NotFound, "no message 'no-such-id' in session 'long'"),
    ({"before": "a", "after": "b"}, ValidationError, "give before or after, not both"),
    ({"before": ""}, ValidationError, "before must not be empty"),
    ({"after": 3}, ValidationError, "after must be a string, got int"),
])
@pytest.mark.remote_too
def test_history_pages_name_a_bad_cursor(
    client: MemoryClient, kwargs: dict[str, Any], error: type[Exception], message: str
) -> None:
    with pytest.raises(error, match=message):
        client.history("long", 10, **kwargs)


@pytest.mark.remote_too
def test_history_does_not_page_across_sessions(client: MemoryClient) -> None:
    other = client.append("other", "user", "elsewhere")
    client.flush()
    with pytest.raises(NotFound):
        client.history("long", 10, before=other)


@pytest.mark.remote_too
def test_history_leaves_the_summaries_out_when_asked(client: MemoryClient,
                                                     config: Config) -> None:
    ids = [client.append("trip", "user", f"turn {i} about the trip") for i in range(6)]
    client.flush()
    send_summary(config, "trip", ids[:4])
    # The summary sits where its stretch begins, beside its sources while they are kept.
    assert [m.id for m in client.history("trip")] == [ids[0], "sum-1", *ids[1:]]
    assert [m.id for m in client.history("trip", summaries=False)] == ids
    assert [m.id for m in client.history("trip", 3, summaries=False)] == ids[3:]
    assert [m.id for m in client.history("trip", 3, before=ids[3], summaries=False)] == ids[:3]
    assert [m.id for m in client.history("trip", 2, after=ids[0], summaries=False)] == ids[1:3]


def test_from_env_finds_the_redis_and_database_the_commands_find(
    redis_url: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """What `memq up` leaves in its data directory is all an agent started there needs:
    the agent's URL file (the admin's is not what an agent reads)."""
    from memq.testing import WriterThread

    for name in ("MEMQ_REDIS_URL", "MEMQ_DB", "MEMQ_CONFIG"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.chdir(tmp_path)
    (tmp_path / "data").mkdir()
    (tmp_path / "data" / "agent.url").write_text(redis_url + "\n")
    (tmp_path / "data" / "admin.url").write_text("redis://memq-admin:x@127.0.0.1:1/0\n")
    writer = WriterThread(Config(redis_url=redis_url, db_path=str(tmp_path / "data/memq.db")))
    with writer, MemoryClient.from_env() as client:
        assert (client.config.redis_url, client.config.db_path) == (redis_url, "data/memq.db")
        client.append("s1", "user", "found it")
        client.flush()
        assert [m.content for m in client.history("s1")] == ["found it"]


def test_from_env_reads_the_url_file_of_the_role_asked(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    for name in ("MEMQ_REDIS_URL", "MEMQ_DB", "MEMQ_CONFIG"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.chdir(tmp_path)
    (tmp_path / "data").mkdir()
    for role in ("agent", "admin"):
        (tmp_path / "data" / f"{role}.url").write_text(f"redis://memq-{role}:pw@h:1/0\n")
    with MemoryClient.from_env() as agent, MemoryClient.from_env(role="admin") as person:
        assert agent.config.redis_url == "redis://memq-agent:pw@h:1/0"
        assert person.config.redis_url == "redis://memq-admin:pw@h:1/0"
    with pytest.raises(ValidationError, match="role must be one of"):
        MemoryClient.from_env(role="root")


HUGE = 10**5000  # past Python's 4,300-digit int-to-string limit: repr() raises ValueError
PLAUSIBLE = {"session_id": "s1", "role": "user", "content": "x", "query": "q",
             "category": "user", "key": "k", "value": "v", "user_id": "u1", "command": "ls",
             "prefix": "git status", "schedule": "every day at 9:00", "prompt": "p",
             "task_id": "t", "name": "t", "event_id": "e", "tool": "edit_file", "args": {},
             "namespace": ["docs"], "message_id": "m1", "url": "https://example.com/h",
             "types": ["fact.*"], "webhook_id": "0123456789abcdef"}
NOT_CALLED = {"close", "flush", "batched", "wait_forgotten",
              "with_own_outbox"}  # the local client's alone: its own test below


def _huge_calls() -> list[tuple[str, str]]:
    import inspect
    calls = []
    for name, method in inspect.getmembers(MemoryClient, inspect.isfunction):
        if name.startswith("_") or name in NOT_CALLED:
            continue
        for param in list(inspect.signature(method).parameters.values())[1:]:
            if param.kind not in (param.VAR_POSITIONAL, param.VAR_KEYWORD):
                calls.append((name, param.name))
    return calls


@pytest.mark.parametrize(("method", "param"), _huge_calls())
@pytest.mark.remote_too
def test_a_huge_integer_anywhere_is_a_memq_error(idle_client: MemoryClient, method: str,
                                                 param: str) -> None:
    """An int with more digits than Python will print (limit=, a flag, an id) is named in a
    MemqError, never a ValueError from the message that describes it."""
    import inspect

    from memq.errors import MemqError

    function = getattr(idle_client, method)
    kwargs = {p.name: PLAUSIBLE[p.name]
              for p in inspect.signature(function).parameters.values()
              if p.default is p.empty and p.name in PLAUSIBLE}
    kwargs[param] = HUGE
    def call() -> object:
        result = function(**kwargs)
        return next(result) if inspect.isgenerator(result) else result  # a follower's step

    with pytest.raises(MemqError):
        call()


def test_an_outbox_sender_must_be_a_client(config: Config) -> None:
    from memq.errors import MemqError

    with MemoryClient(config=config) as client:
        for sender in (HUGE, "redis://elsewhere", object()):
            with pytest.raises(MemqError, match="sender must be a MemoryClient"):
                client.with_own_outbox(sender)  # type: ignore[arg-type]


def test_from_env_names_a_huge_role() -> None:
    from memq.errors import MemqError

    with pytest.raises(MemqError, match="an integer of about 5000 digits"):
        MemoryClient.from_env(role=HUGE)  # type: ignore[arg-type]
