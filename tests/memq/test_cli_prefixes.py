"""The person's commands: ``memq allow``/``revoke``/``allowed``, ``memq facts set|delete``,
``memq tasks add|pause|resume|delete`` -- run as admin, refused with an agent's URL."""

from __future__ import annotations

import apsw
import orjson
import pytest

from memq import MemoryClient
from memq.authority import Role
from memq.cli import main
from memq.config import Config
from memq.testing import WriterThread

pytestmark = pytest.mark.redis


def run(config: Config, *argv: str, url: str | None = None) -> int:
    return main([*argv, "--db", config.db_path, "--redis-url", url or config.redis_url])


@pytest.fixture
def admin_url(role_urls: dict[Role, str]) -> str:
    return role_urls[Role.ADMIN]


def test_allow_revoke_and_list_prefixes(
    config: Config, writer: WriterThread, admin_url: str, capsys: pytest.CaptureFixture[str]
) -> None:
    assert run(config, "allow", "git status", "ls  -la", url=admin_url) == 0
    assert capsys.readouterr().out == "allowed: git status\nallowed: ls -la\n"
    with MemoryClient(config=config) as client:
        assert client.is_command_allowed("git status -s && ls -la /tmp")
    assert run(config, "allowed", "--json", url=admin_url) == 0
    listed = orjson.loads(capsys.readouterr().out)["prefixes"]
    assert [(p["prefix"], p["origin"]) for p in listed] == [
        ("git status", "approval"), ("ls -la", "approval")]
    assert run(config, "revoke", "ls -la", url=admin_url) == 0
    assert capsys.readouterr().out == "revoked: ls -la\n"
    assert run(config, "allowed", url=admin_url) == 0
    assert capsys.readouterr().out.startswith("git status  (approval, since 20")


def test_a_tenants_approvals_are_its_own(
    config: Config, writer: WriterThread, admin_url: str, capsys: pytest.CaptureFixture[str]
) -> None:
    assert run(config, "allow", "--tenant", "acme", "npm test", url=admin_url) == 0
    assert run(config, "allowed", "--tenant", "acme", url=admin_url) == 0
    assert "npm test  (approval" in capsys.readouterr().out
    assert run(config, "allowed", url=admin_url) == 0
    assert capsys.readouterr().out.endswith("no prefix is allowed\n")
    with MemoryClient(config=config) as client:
        assert client.is_command_allowed("npm test", tenant="acme")
        assert not client.is_command_allowed("npm test")
    assert run(config, "revoke", "--tenant", "acme", "npm test", url=admin_url) == 0


@pytest.mark.parametrize("argv", [
    ("allow", "rm -rf"),
    ("revoke", "git status"),
    ("facts", "set", "user", "name", "Mallory"),
    ("facts", "delete", "--user", "dana", "user", "name"),
    ("facts", "set", "--as-agent", "--force", "user", "name", "Mallory"),
    ("tasks", "add", "--trusted", "backup", "every day at 3am", "back up"),
])
def test_an_agents_url_is_refused_with_one_line(
    argv: tuple[str, ...], config: Config, writer: WriterThread, role_urls: dict[Role, str],
    capsys: pytest.CaptureFixture[str],
) -> None:
    assert run(config, *argv, url=role_urls[Role.AGENT]) == 1
    err = capsys.readouterr().err
    assert err.startswith("memq: error: ")
    assert "may only come from admin, not from an agent (memq:inbox)" in err
    assert len(err.strip().splitlines()) == 1


def test_user_facts_from_the_command_line(
    config: Config, writer: WriterThread, admin_url: str, role_urls: dict[Role, str],
    capsys: pytest.CaptureFixture[str],
) -> None:
    assert run(config, "facts", "set", "user", "city", "Lisbon", url=admin_url) == 0
    assert capsys.readouterr().out == "set user/city = 'Lisbon' [user]\n"
    assert run(config, "facts", "set", "--user", "dana", "prefs", "tea", "green",
               url=admin_url) == 0
    assert capsys.readouterr().out == "set dana: prefs/tea = 'green' [user]\n"
    with MemoryClient(config=config.replace(redis_url=role_urls[Role.AGENT])) as agent:
        agent.set_fact("user", "city", "Paris")  # an agent: logged, not applied
        agent.flush()
        assert [(f.value, f.source) for f in agent.facts("user")] == [("Lisbon", "user")]
        assert [f.value for f in agent.facts("prefs", user_id="dana")] == ["green"]
    assert run(config, "facts", "delete", "user", "city", url=admin_url) == 0
    assert capsys.readouterr().out == "deleted user/city\n"
    assert run(config, "facts", "delete", "--user", "dana", "prefs", "tea", url=admin_url) == 0
    assert capsys.readouterr().out == "deleted dana: prefs/tea\n"
    assert main(["facts", "list", "--user", "dana", "--json", "--db", config.db_path]) == 0
    assert orjson.loads(capsys.readouterr().out) == {"facts": []}
    assert run(config, "facts", "set", "--as-agent", "user", "city", "Rome", url=admin_url) == 0
    assert capsys.readouterr().out == "set user/city = 'Rome' [agent]\n"
    # Deleting what is not there says so, and sends nothing: a mistyped key, another
    # user's fact, one already deleted.
    events = event_count(config)
    for argv in (("user", "cty"), ("--user", "erin", "user", "city"),
                 ("--user", "dana", "prefs", "tea")):
        assert run(config, "facts", "delete", *argv, url=admin_url) == 1
        captured = capsys.readouterr()
        assert captured.out == ""
        assert captured.err.startswith("memq: error: no fact "), captured.err
        assert "nothing to delete" in captured.err
    assert event_count(config) == events
    with MemoryClient(config=config) as client:
        assert [(f.value, f.source) for f in client.facts("user")] == [("Rome", "agent")]


def test_trusted_tasks_from_the_command_line(
    config: Config, writer: WriterThread, admin_url: str, role_urls: dict[Role, str],
    capsys: pytest.CaptureFixture[str],
) -> None:
    assert run(config, "tasks", "add", "--trusted", "--tz", "UTC", "backup",
               "every day at 3am", "run the backup", url=admin_url) == 0
    out = capsys.readouterr().out
    task_id = out.split()[0]
    assert f"{task_id}  backup  (every day at 3am, trusted), next run 20" in out
    with MemoryClient(config=config.replace(redis_url=role_urls[Role.AGENT])) as agent:
        assert agent.task(task_id).is_trusted
    for action, said in (("pause", "paused"), ("resume", "resumed"), ("delete", "deleted")):
        assert run(config, "tasks", action, task_id, url=admin_url) == 0
        assert capsys.readouterr().out == f"{said} {task_id}\n"
    assert main(["tasks", "list", "--json", "--db", config.db_path]) == 0
    assert orjson.loads(capsys.readouterr().out) == {"tasks": []}


def test_the_person_schedules_a_tenants_task(
    config: Config, writer: WriterThread, admin_url: str, capsys: pytest.CaptureFixture[str],
) -> None:
    assert run(config, "tasks", "add", "--tenant", "acme", "nightly", "every day at 2am",
               "sweep", url=admin_url) == 0
    task_id = capsys.readouterr().out.split()[0]
    with MemoryClient(config=config.replace(redis_url=admin_url)) as person:
        assert person.task(task_id).name == "acme\x1fnightly"
    assert main(["tasks", "list", "--db", config.db_path]) == 0
    assert f"{task_id}  acme:'nightly' [tool]" in capsys.readouterr().out
    assert run(config, "tasks", "add", "--tenant", "Acme!", "nightly", "every day at 2am",
               "sweep", url=admin_url) == 2
    assert "--tenant: a tenant is 1 to 40" in capsys.readouterr().err


def test_without_a_writer_the_change_waits_or_is_sent_only(
    config: Config, admin_url: str, capsys: pytest.CaptureFixture[str]
) -> None:
    assert run(config, "allow", "make test", "--wait", "0.3", url=admin_url) == 1
    err = capsys.readouterr().err
    assert err.startswith("memq: error: sent, but not applied yet: the writer has not "
                          "committed entry ")
    assert run(config, "allow", "make lint", "--wait", "0", url=admin_url) == 0
    assert capsys.readouterr().out == "allowed: make lint\n"


def test_wait_must_be_a_duration(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exited:
        main(["allow", "x", "--wait", "-1"])
    assert exited.value.code == 2
    assert "must be a positive number of seconds" in capsys.readouterr().err


def event_count(config: Config) -> int:
    with MemoryClient(config=config) as client:
        client.flush()
    conn = apsw.Connection(config.db_path, flags=apsw.SQLITE_OPEN_READONLY)
    try:
        return int(conn.execute("SELECT count(*) FROM events").fetchone()[0])
    finally:
        conn.close()
