"""``memq facts list|history``: facts and their changes, read from the database."""

from __future__ import annotations

import orjson
import pytest

from memq import MemoryClient
from memq.cli import main
from memq.config import Config

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
    rows = orjson.loads(capsys.readouterr().out)["facts"]
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
    shown = orjson.loads(capsys.readouterr().out)
    assert (shown["category"], shown["key"]) == ("home", "city")
    changes = shown["changes"]
    assert [(c["action"], c["value"], c["applied"]) for c in changes] == [
        ("set", "Porto", True), ("deleted", None, True)]
    assert main(["facts", "history", "no", "such", "--db", config.db_path]) == 0
    assert capsys.readouterr().out == "no changes recorded for no/such\n"


def test_a_missing_database_is_a_one_line_error(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["facts", "list", "--db", "/nonexistent/dir/memq.db"]) == 1
    assert capsys.readouterr().err == "memq: error: database not found: /nonexistent/dir/memq.db\n"


def test_a_users_facts_only_with_user(
    client: MemoryClient, config: Config, capsys: pytest.CaptureFixture[str]
) -> None:
    client.set_fact("health", "allergy", "peanuts", user_id="u1")
    client.set_fact("health", "allergy", "shellfish", user_id="u2")
    client.set_fact("office", "wifi", "guest")
    client.flush()
    assert main(["facts", "list", "--db", config.db_path]) == 0
    assert [line.split("  [")[0] for line in capsys.readouterr().out.splitlines()] == [
        "office/wifi = 'guest'"]
    assert main(["facts", "list", "--user", "u1", "--db", config.db_path]) == 0
    out = capsys.readouterr().out
    assert "u1: health/allergy = 'peanuts'" in out
    assert "shellfish" not in out
    assert main(["facts", "history", "health", "allergy", "--user", "u2", "--json",
                 "--db", config.db_path]) == 0
    shown = orjson.loads(capsys.readouterr().out)
    assert shown["user_id"] == "u2"
    assert [change["value"] for change in shown["changes"]] == ["shellfish"]
    assert main(["facts", "list", "--user", "a\nb", "--db", config.db_path]) == 2
    assert "--user contains a control character" in capsys.readouterr().err
