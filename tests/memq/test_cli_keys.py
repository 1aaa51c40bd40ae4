"""``memq keys create|list|revoke``: the person's API keys, refused with an agent's URL."""

from __future__ import annotations

import orjson
import pytest

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
    assert f"{made['id']}  support-bot  alice, bob; can read,write; expires 20" in listed
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
