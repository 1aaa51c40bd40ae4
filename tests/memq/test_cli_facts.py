"""``memq facts list|history``: facts and their changes, read from the database."""

from __future__ import annotations

import orjson
import pytest

from memq.cli import main
from memq.config import Config
from producers import MemoryClient

pytestmark = pytest.mark.redis


@pytest.fixture
def facts(client: MemoryClient) -> MemoryClient:
    client.set_fact("prefs", "editor", "vim", source="user")
    client.set_fact("prefs", "editor", "emacs")  # an agent: the user's value is protected
    client.set_fact("prefs", "shell", "zsh")
    client.set_fact("home", "city", "Porto")
    client.delete_fact("home", "city")
    client.flush()
    return client


def test_list_shows_current_facts_by_category(
    facts: MemoryClient, config: Config, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["facts", "list", "--db", config.db_path]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert [line.split("  [")[0] for line in lines] == [
        "prefs/editor = 'vim'", "prefs/shell = 'zsh'"]
    assert lines[0].startswith("prefs/editor = 'vim'  [user, updated 20")
    assert main(["facts", "list", "--category", "home", "--db", config.db_path]) == 0
    assert capsys.readouterr().out == "no facts in category 'home'\n"


def test_list_as_json(facts: MemoryClient, config: Config,
                      capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["facts", "list", "--json", "--category", "prefs", "--db", config.db_path]) == 0
    rows = [orjson.loads(line) for line in capsys.readouterr().out.splitlines()]
    assert [(r["key"], r["value"], r["source"]) for r in rows] == [
        ("editor", "vim", "user"), ("shell", "zsh", "agent")]


def test_history_shows_every_change_and_the_refused_one(
    facts: MemoryClient, config: Config, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["facts", "history", "prefs", "editor", "--db", config.db_path]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert [line.split("  ", 1)[1] for line in lines] == [
        "user: set 'vim'",
        "agent: set 'emacs'  not applied: the user's value is protected",
    ]
    assert main(["facts", "history", "home", "city", "--json", "--db", config.db_path]) == 0
    changes = [orjson.loads(line) for line in capsys.readouterr().out.splitlines()]
    assert [(c["action"], c["value"], c["applied"]) for c in changes] == [
        ("set", "Porto", True), ("deleted", None, True)]
    assert main(["facts", "history", "no", "such", "--db", config.db_path]) == 0
    assert capsys.readouterr().out == "no changes recorded for no/such\n"


def test_a_missing_database_is_a_one_line_error(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["facts", "list", "--db", "/nonexistent/dir/memq.db"]) == 1
    assert capsys.readouterr().err == "memq: error: database not found: /nonexistent/dir/memq.db\n"
