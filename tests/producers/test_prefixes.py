"""Terminal approvals through the client, the inbox and the real writer."""

from __future__ import annotations

from typing import Any

import pytest
import redis

from memq import MemoryClient, names
from memq.clock import now_rfc3339, uuid7
from memq.config import Config, TerminalConfig, from_mapping
from memq.errors import ConfigError, NotFound, ValidationError
from memq.events import Event, EventType, encode
from memq.producers.prefixes import AllowedPrefix
from memq.store import schema
from memq.store.connection import open_connection
from memq.store.rebuild import check
from memq.testing import inbox_entries

pytestmark = pytest.mark.redis


@pytest.mark.remote_too
def test_allow_and_revoke(client: MemoryClient, config: Config) -> None:
    assert not client.is_command_allowed("git status")
    assert client.allow_prefix("git   status") == "git status"
    client.flush()
    assert client.is_command_allowed("git status -s")
    assert not client.is_command_allowed("git push")
    assert not client.is_command_allowed("git status; git push")
    assert not client.is_command_allowed("git status > out.txt")
    assert client.revoke_prefix("git\tstatus") == "git status"
    client.flush()
    assert not client.is_command_allowed("git status")
    assert client.allowed_prefixes() == []
    assert check(config.db_path) == []


@pytest.mark.remote_too
def test_word_boundaries(client: MemoryClient) -> None:
    client.allow_prefix("ls")
    client.flush()
    assert client.is_command_allowed("ls -la")
    assert client.is_command_allowed("ls -la | ls")
    assert not client.is_command_allowed("lsblk")
    assert not client.is_command_allowed("ls $(rm -rf /)")
    assert not client.is_command_allowed("ls & rm x")


def migrated(config: Config) -> None:
    conn = open_connection(config.db_path)
    schema.migrate(conn)
    conn.close()


def test_own_writes_are_visible_before_the_writer_commits(config: Config) -> None:
    migrated(config)  # no writer runs: approvals wait in the inbox, yet this client sees them
    with MemoryClient(config=config) as client, MemoryClient(config=config) as other:
        client.allow_prefix("make test")
        assert client.is_command_allowed("make test -j4")
        assert not other.is_command_allowed("make test")  # only its own writes
        assert [(p.prefix, p.origin) for p in client.allowed_prefixes()] == [
            ("make test", "pending")]
        client.revoke_prefix("make test")
        assert not client.is_command_allowed("make test")
        assert client.allowed_prefixes() == []
        with client.batched():
            client.allow_prefix("make lint")
            assert client.is_command_allowed("make lint")  # also while still buffered
        stream = client.outbox.stream
    assert redis.Redis.from_url(config.redis_url).xlen(stream) == 3


def test_pending_overlay_never_outlives_a_later_revocation(config: Config, writer: Any) -> None:
    with MemoryClient(config=config) as agent, MemoryClient(config=config) as admin:
        agent.allow_prefix("npm run build")
        agent.flush()
        assert agent.is_command_allowed("npm run build")
        admin.revoke_prefix("npm run build")
        admin.flush()
        assert not agent.is_command_allowed("npm run build")


def test_config_prefixes(config: Config, writer: Any) -> None:
    configured = config.replace(terminal=TerminalConfig(allowed_prefixes=("git log", "pwd")))
    with MemoryClient(config=configured) as client:
        assert client.is_command_allowed("git log --oneline")
        assert not client.is_command_allowed("git log --oneline | head")
        client.allow_prefix("head")
        client.flush()
        assert client.is_command_allowed("git log --oneline | head")
        listed = client.allowed_prefixes()
        assert [(p.prefix, p.origin) for p in listed] == [
            ("git log", "config"), ("head", "approval"), ("pwd", "config")]
        assert listed[1].created_at is not None
        with pytest.raises(ValidationError, match=r"'pwd' is allowed by the configuration"):
            client.revoke_prefix("pwd")
        assert client.is_command_allowed("pwd")


def test_trusted_commands_skip_the_check(idle_client: MemoryClient) -> None:
    # Not even the database is read: it does not exist here.
    assert idle_client.is_command_allowed("rm -rf build && make", trusted=True)
    migrated(idle_client.config)
    assert not idle_client.is_command_allowed("rm -rf build && make", trusted=False)


@pytest.mark.remote_too
def test_revoking_what_is_not_allowed_is_an_error(client: MemoryClient) -> None:
    client.allow_prefix("git status")
    client.flush()
    with pytest.raises(NotFound, match="'git stauts' is not an allowed prefix"):
        client.revoke_prefix("git stauts")
    assert client.is_command_allowed("git status")


def test_writer_refuses_a_bad_approval(client: MemoryClient, config: Config) -> None:
    raw = encode(Event(id=uuid7(), type=EventType.PREFIX_ALLOWED, session_id=None,
                       created_at=now_rfc3339(), payload={"prefix": "ls; rm -rf /"}))
    redis.Redis.from_url(config.redis_url).xadd(names.ADMIN_INBOX_STREAM,
                                                {names.EVENT_FIELD: raw})
    client.allow_prefix("cat")
    client.flush()
    with client.readers.connection() as conn:
        [(reason,)] = conn.execute("SELECT reason FROM rejected_events").fetchall()
    assert reason == "prefix.allowed: payload.prefix contains a shell metacharacter ';'"
    assert [p.prefix for p in client.allowed_prefixes()] == ["cat"]


@pytest.mark.remote_too
def test_allowing_twice_keeps_the_first_approval(client: MemoryClient) -> None:
    client.allow_prefix("cat")
    client.flush()
    [first] = client.allowed_prefixes()
    client.allow_prefix("cat")
    client.flush()
    assert client.allowed_prefixes() == [first]
    assert first == AllowedPrefix("cat", "approval", first.created_at)


BAD_CALLS: list[tuple[str, tuple[Any, ...], dict[str, Any], str]] = [
    ("allow_prefix", (5,), {}, "prefix must be a string"),
    ("allow_prefix", ("",), {}, "prefix is empty"),
    ("allow_prefix", ("ls; rm",), {}, "prefix contains a shell metacharacter ';'"),
    ("allow_prefix", ("git $(x)",), {}, "prefix contains a shell metacharacter '$'"),
    ("allow_prefix", ("ＧＩＴ",), {}, "prefix contains a non-ASCII character"),
    ("allow_prefix", ("FOO=1 ls",), {}, "prefix starts with an environment assignment"),
    ("allow_prefix", ("for",), {}, "prefix starts with the shell keyword 'for'"),
    ("allow_prefix", ("ls\x07",), {}, "prefix contains a control character"),
    ("revoke_prefix", (None,), {}, "prefix must be a string"),
    ("revoke_prefix", ("a > b",), {}, "prefix contains a shell metacharacter '>'"),
    ("is_command_allowed", (None,), {}, "command must be a string"),
    ("is_command_allowed", (["ls"],), {}, "command must be a string"),
    ("is_command_allowed", ("ls",), {"trusted": "yes"}, "trusted must be True or False"),
    ("is_command_allowed", ("ls",), {"trusted": 1}, "trusted must be True or False, got 1"),
]


@pytest.mark.parametrize(("method", "args", "kwargs", "message"), BAD_CALLS,
                         ids=[f"{m}-{msg[:30]}" for m, _, _, msg in BAD_CALLS])
def test_bad_arguments(idle_client: MemoryClient, method: str, args: tuple[Any, ...],
                       kwargs: dict[str, Any], message: str) -> None:
    with pytest.raises(ValidationError) as caught:
        getattr(idle_client, method)(*args, **kwargs)
    assert message in str(caught.value)
    assert inbox_entries(idle_client.redis) == 0


@pytest.mark.parametrize(
    ("prefixes", "message"),
    [(["ls", "rm -rf /; x"], "[terminal] allowed_prefixes: 'rm -rf /; x': prefix contains"),
     (["  "], "[terminal] allowed_prefixes: '  ': prefix is empty"),
     ([3], "[terminal] allowed_prefixes: 3: prefix must be a string")],
)
def test_bad_configured_prefixes(prefixes: list[Any], message: str) -> None:
    with pytest.raises(ConfigError) as caught:
        from_mapping({"terminal": {"allowed_prefixes": prefixes}})
    assert message in str(caught.value)
