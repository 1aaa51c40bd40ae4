"""``memq demo`` against a running writer: the agents' turns are committed, and a build
without a feature says so instead of failing."""

from __future__ import annotations

import apsw
import pytest

from memq import MemoryClient
from memq.cli import main
from memq.cli.demo import DEMO_USER
from memq.config import Config
from memq.testing import WriterThread

pytestmark = pytest.mark.redis


def test_demo_commits_every_agents_turns(config: Config, writer: WriterThread, capsys) -> None:
    code = main(["demo", "--db", config.db_path, "--redis-url", config.redis_url,
                 "--timeout", "0.5"])
    out = capsys.readouterr().out
    assert code == 0, out
    assert "support: 16 turns committed" in out
    conn = apsw.Connection(config.db_path, flags=apsw.SQLITE_OPEN_READONLY)
    sessions = dict(conn.execute(
        "SELECT substr(session_id, 13), count(*) FROM messages GROUP BY session_id"))
    assert sessions == {"support": 16, "research": 5, "ops": 4}
    important = conn.execute("SELECT content FROM messages WHERE importance >= 0.8").fetchall()
    assert len(important) == 1
    assert "peanuts" in important[0][0]
    assert "fact: " in out
    assert "category=user, key=allergy, value=peanuts (severe)" in out
    assert "scheduled task " in out
    assert "get_context(" in out
    with MemoryClient(config=config) as client:
        # The user's facts are the demo user's: another user never sees the allergy.
        assert {f.key for f in client.facts()} == {"billing_deploys"}
        assert {f.key for f in client.facts(user_id=DEMO_USER)} == {
            "name", "allergy", "billing_deploys"}
        assert {s.user_id for s in client.sessions()} == {DEMO_USER}
        assert [t.name for t in client.tasks()] == ["billing-rollout-check"]


def test_demo_without_a_writer_fails_with_a_clear_message(config: Config, capsys) -> None:
    code = main(["demo", "--db", config.db_path, "--redis-url", config.redis_url,
                 "--timeout", "0.3"])
    err = capsys.readouterr().err
    assert code == 1
    assert "is `memq writer` running?" in err


def test_demo_refuses_a_database_that_holds_data(
    config: Config, writer: WriterThread, capsys
) -> None:
    with MemoryClient(config=config) as client:
        client.append("real-work", "user", "a real conversation")
        client.flush()
    code = main(["demo", "--db", config.db_path, "--redis-url", config.redis_url])
    err = capsys.readouterr().err
    assert code == 2
    assert f"{config.db_path} already holds 1 events" in err
    assert "Pass --yes to add them" in err
    with MemoryClient(config=config) as client:  # nothing of the demo's was written
        assert client.facts() == []
        assert client.tasks() == []
    code = main(["demo", "--yes", "--db", config.db_path, "--redis-url", config.redis_url,
                 "--timeout", "0.5"])
    assert code == 0
    assert "support: 16 turns committed" in capsys.readouterr().out
