"""MemoryClient.append / flush / history: validation, defaults, and errors."""

from __future__ import annotations

from datetime import datetime, timedelta, timezone
from typing import Any

import pytest
import redis

from memq import names
from memq.config import ClientConfig, Config
from memq.errors import BrokerError, FlushTimeout, ValidationError
from producers import MemoryClient

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
    ({"tool_calls": [object()]}, "tool_calls must be JSON-serialisable"),
    ({"tool_call_id": ""}, "tool_call_id must not be empty"),
    ({"tool_name": 3}, "tool_name must be a string, got int"),
    ({"created_at": datetime(2026, 1, 1)}, "has no time zone"),
    ({"created_at": "2026-01-01 10:00"}, "created_at has no time zone offset"),
    ({"created_at": "last tuesday"}, "created_at is not RFC3339"),
    ({"session_id": ""}, "session_id must not be empty"),
    ({"session_id": "s" * 201}, "session_id is 201 characters, over the 200 limit"),
    ({"session_id": "a\tb"}, "session_id contains a control character"),
    ({"session_id": 42}, "session_id must be a string, got int"),
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
        assert client.redis.xlen(names.INBOX_STREAM) == 0


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


def test_tool_fields_round_trip(client: MemoryClient) -> None:
    calls = [{"id": "c1", "function": {"name": "ls", "arguments": "{\"path\": \"/\"}"}}]
    client.append("s", "assistant", "", tool_calls=calls)
    client.append("s", "tool", "a.txt", tool_call_id="c1", tool_name="ls")
    client.flush()
    first, second = client.history("s")
    assert first.tool_calls == calls
    assert (second.tool_call_id, second.tool_name) == ("c1", "ls")


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
    from tests.conftest import free_port

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
    assert redis.Redis.from_url(config.redis_url).get(names.COMMITTED_KEY) is not None
