"""``memq webhooks add|list|remove|deliveries``: the person's, refused with an agent's URL."""

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


def test_add_list_deliveries_remove(config: Config, writer: WriterThread,
                                    role_urls: dict[Role, str],
                                    capsys: pytest.CaptureFixture[str]) -> None:
    admin = role_urls[Role.ADMIN]
    assert run(config, "webhooks", "add", "https://example.com/memq", "--events",
               "fact.*, message.appended", "--user", "alice", "--json", url=admin) == 0
    made = orjson.loads(capsys.readouterr().out)
    assert made["secret"].startswith("whsec_")
    assert run(config, "webhooks", "list", url=admin) == 0
    listed = capsys.readouterr().out
    assert f"{made['id']}  https://example.com/memq  fact.*,message.appended; user alice; " \
           "active" in listed
    assert made["secret"] not in listed
    assert run(config, "webhooks", "deliveries", made["id"], url=admin) == 0
    assert capsys.readouterr().out == "no delivery yet\n"
    assert run(config, "webhooks", "remove", made["id"], url=admin) == 0
    assert run(config, "webhooks", "remove", made["id"], url=admin) == 1
    assert "no webhook" in capsys.readouterr().err


@pytest.mark.parametrize(("url", "problem"), [
    ("ftp://example.com/x", "http:// or https://"),
    ("https://user:pw@example.com/x", "user name or password"),
    ("https://exa mple.com/x", "spaces"),
])
def test_a_bad_url_or_an_agent_is_refused_by_name(config: Config, writer: WriterThread,
                                                  role_urls: dict[Role, str],
                                                  capsys: pytest.CaptureFixture[str],
                                                  url: str, problem: str) -> None:
    assert run(config, "webhooks", "add", url, "--events", "*",
               url=role_urls[Role.ADMIN]) == 2
    assert problem in capsys.readouterr().err
    assert run(config, "webhooks", "add", "https://example.com/x", "--events", "*",
               url=role_urls[Role.AGENT]) == 1
    assert "webhook.added" in capsys.readouterr().err
