"""``memq sessions``: sessions by last activity, filtered and paged, as text or JSON."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import orjson
import pytest

from memq import MemoryClient
from memq.cli import main
from memq.config import Config

pytestmark = pytest.mark.redis

T0 = datetime(2026, 3, 1, 9, 0, tzinfo=UTC)


@pytest.fixture
def sessions(client: MemoryClient) -> MemoryClient:
    for session, user, agent, minute in [("a", "u1", "support", 1), ("b", "u2", None, 2),
                                         ("c", None, None, 3)]:
        client.append(session, "user", "hi", created_at=T0 + timedelta(minutes=minute),
                      user_id=user, agent_id=agent)
    client.flush()
    return client


def test_text_and_json(sessions: MemoryClient, config: Config,
                       capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["sessions", "--db", config.db_path]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert [line.split()[-1] for line in lines] == ["c", "b", "a"]
    assert "u1/support" in lines[2]
    assert "1 msgs" in lines[2]
    assert main(["sessions", "--user", "u1", "--json", "--db", config.db_path]) == 0
    [row] = orjson.loads(capsys.readouterr().out)["sessions"]
    assert (row["session_id"], row["user_id"], row["agent_id"], row["message_count"]) == (
        "a", "u1", "support", 1)


@pytest.mark.parametrize("hostile", ["s\u202eevil", "line\u2028break", "iso\u2066late",
                                     "u\u2029p"])
def test_a_listing_shows_bidi_and_line_separators_escaped(
    client: MemoryClient, config: Config, capsys: pytest.CaptureFixture[str], hostile: str
) -> None:
    """An id is an agent's text: printed raw, a bidirectional override makes the line read
    differently from what is stored, and a line separator splits it."""
    client.append(hostile, "user", "hi", user_id=f"owner-{hostile}")
    client.set_fact("c", f"k-{hostile}", "v")
    client.flush()
    for command in (["sessions"], ["facts", "list"]):
        assert main([*command, "--db", config.db_path]) == 0
        out = capsys.readouterr().out
        assert not any(ch in out for ch in "\u202e\u2028\u2029\u2066")
        assert repr(hostile[-5:])[1:-1] in out or repr(hostile)[1:-1] in out


def test_paging_and_filters(sessions: MemoryClient, config: Config,
                            capsys: pytest.CaptureFixture[str]) -> None:
    before = (T0 + timedelta(minutes=3)).isoformat()
    assert main(["sessions", "--limit", "1", "--before", before, "--db", config.db_path]) == 0
    assert capsys.readouterr().out.split()[-1] == "b"
    assert main(["sessions", "--agent", "nobody", "--db", config.db_path]) == 0
    assert capsys.readouterr().out == "no sessions\n"


def test_one_tenants_sessions_in_its_own_names(sessions: MemoryClient, config: Config,
                                               capsys: pytest.CaptureFixture[str]) -> None:
    """The local database spans every tenant; --tenant shows one, as its keys name it."""
    sessions.append("acme\x1fa", "user", "hi", user_id="acme\x1fu1", agent_id="acme\x1fbot")
    sessions.flush()
    assert main(["sessions", "--tenant", "acme", "--json", "--db", config.db_path]) == 0
    [row] = orjson.loads(capsys.readouterr().out)["sessions"]
    assert (row["session_id"], row["user_id"], row["agent_id"]) == ("a", "u1", "bot")
    assert main(["sessions", "--tenant", "acme", "--user", "u2", "--db", config.db_path]) == 0
    assert capsys.readouterr().out == "no sessions\n"
    assert main(["sessions", "--tenant", "default", "--db", config.db_path]) == 0
    assert [line.split()[-1] for line in capsys.readouterr().out.splitlines()] == [
        "c", "b", "a"]
    assert main(["sessions", "--tenant", "Acme!", "--db", config.db_path]) == 2
    assert "--tenant: a tenant is 1 to 40" in capsys.readouterr().err


@pytest.mark.parametrize(("args", "message"), [
    (["--limit", "0"], "a number of sessions is from 1 to 10000, got 0"),
    (["--limit", "x"], "not a number of sessions: 'x'"),
])
def test_usage_errors(config: Config, capsys: pytest.CaptureFixture[str], args: list[str],
                      message: str) -> None:
    with pytest.raises(SystemExit) as info:
        main(["sessions", *args, "--db", config.db_path])
    assert info.value.code == 2
    assert message in capsys.readouterr().err


@pytest.mark.parametrize(("args", "message"), [
    (["--before", "soon"], "--before must be an RFC3339 string"),
    (["--user", ""], "--user must not be empty"),
])
def test_bad_values(config: Config, capsys: pytest.CaptureFixture[str], args: list[str],
                    message: str) -> None:
    assert main(["sessions", *args, "--db", config.db_path]) == 2  # a bad value: usage
    assert message in capsys.readouterr().err
