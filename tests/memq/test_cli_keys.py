"""``memq keys create|list|revoke``: the person's API keys, refused with an agent's URL."""

from __future__ import annotations

import orjson
import pytest

from memq import MemoryClient
from memq.authority import Role
from memq.cli import main
from memq.config import Config
from memq.testing import WriterThread

pytestmark = pytest.mark.redis


def run(config: Config, *argv: str, url: str) -> int:
    return main([*argv, "--db", config.db_path, "--redis-url", url])


def test_create_list_and_revoke(config: Config, writer: WriterThread,
                                role_urls: dict[Role, str],
                                capsys: pytest.CaptureFixture[str]) -> None:
    admin = role_urls[Role.ADMIN]
    assert run(config, "keys", "create", "support-bot", "--user", "alice", "--user", "bob",
               "--can", "read,write", "--expires", "30d", "--json", url=admin) == 0
    made = orjson.loads(capsys.readouterr().out)
    assert made["secret"].startswith(f"mk_{made['id']}_")
    assert run(config, "keys", "list", url=admin) == 0
    listed = capsys.readouterr().out
    assert f"{made['id']}  support-bot  tenant default: alice, bob; can read,write; " \
           "expires 20" in listed
    assert made["secret"] not in listed
    assert run(config, "keys", "revoke", made["id"], url=admin) == 0
    assert capsys.readouterr().out == f"revoked: {made['id']}\n"
    assert run(config, "keys", "list", "--json", url=admin) == 0
    (key,) = orjson.loads(capsys.readouterr().out)["keys"]
    assert key["revoked_at"] is not None


@pytest.mark.parametrize(("argv", "message"), [
    (("keys", "create", "k", "--user", "a", "--can", "fly"), "can must list what the key"),
    (("keys", "create", "k", "--user", ""), "users must not be empty"),
    (("keys", "revoke", "0" * 16), "no key '0000000000000000'"),
    (("keys", "revoke", "x; drop"), "no key"),
])
def test_bad_requests_are_named(config: Config, writer: WriterThread,
                                role_urls: dict[Role, str], capsys: pytest.CaptureFixture[str],
                                argv: tuple[str, ...], message: str) -> None:
    assert run(config, *argv, url=role_urls[Role.ADMIN]) != 0
    assert message in capsys.readouterr().err


@pytest.mark.parametrize("argv", [("keys", "create", "k", "--all-users"), ("keys", "list")])
def test_an_agent_may_not(config: Config, writer: WriterThread, role_urls: dict[Role, str],
                          capsys: pytest.CaptureFixture[str], argv: tuple[str, ...]) -> None:
    assert run(config, *argv, url=role_urls[Role.AGENT]) != 0
    assert "admin" in capsys.readouterr().err


def test_audit_lists_what_each_key_sent(config: Config, writer: WriterThread,
                                        role_urls: dict[Role, str],
                                        capsys: pytest.CaptureFixture[str]) -> None:
    admin = role_urls[Role.ADMIN]
    assert run(config, "keys", "create", "bot", "--user", "alice", "--json", url=admin) == 0
    key_id = orjson.loads(capsys.readouterr().out)["id"]
    with MemoryClient(config=config) as sent_for_key:  # as memq serve sends for a key
        sent_for_key.outbox.acting_for = key_id
        sent_for_key.append("trip", "user", "a window seat", user_id="alice")
        sent_for_key.flush()
    with MemoryClient(config=config) as trusted:
        trusted.append("other", "user", "not through a key", user_id="alice")
        trusted.flush()
    assert run(config, "audit", "--key", key_id, "--json", url=admin) == 0
    (entry,) = orjson.loads(capsys.readouterr().out)["events"]
    assert (entry["type"], entry["user_id"], entry["session_id"], entry["key_name"]) == (
        "message.appended", "alice", "trip", "bot")
    assert run(config, "audit", "--user", "bob", url=admin) == 0
    assert capsys.readouterr().out == "nothing sent through a key yet\n"
    assert run(config, "audit", url=admin) == 0
    assert f"{key_id} (bot)  message.appended  user alice  session trip" in \
        capsys.readouterr().out


def test_a_key_is_of_one_tenant_named_when_it_is_made(config: Config, writer: WriterThread,
                                                      role_urls: dict[Role, str],
                                                      capsys: pytest.CaptureFixture[str]) -> None:
    admin = role_urls[Role.ADMIN]
    assert run(config, "keys", "create", "k", "--tenant", "acme", "--user", "u",
               url=admin) == 0
    capsys.readouterr()
    assert run(config, "keys", "list", url=admin) == 0
    assert "tenant acme: u;" in capsys.readouterr().out
    assert run(config, "keys", "create", "k", "--tenant", "Not A Tenant", "--user", "u",
               url=admin) == 2  # a usage error
    assert "a tenant is 1 to 40 of a-z" in capsys.readouterr().err
