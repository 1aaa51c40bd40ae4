"""Facts through the client, the inbox and the real writer."""

from __future__ import annotations

import subprocess
from datetime import UTC, datetime
from typing import Any

import pytest

import memq
from memq import MemoryClient
from memq.clock import uuid7
from memq.config import Config, RetrievalConfig
from memq.errors import ValidationError
from memq.events import Event, EventType
from memq.producers.facts import with_pending_facts
from memq.store.read.facts import Fact
from memq.testing import WriterThread, inbox_entries
from tests.conftest import ROOT, memq_command

pytestmark = pytest.mark.redis


@pytest.mark.remote_too
def test_set_read_update_delete(client: MemoryClient) -> None:
    client.set_fact("prefs", "editor", "vim")
    client.set_fact("prefs", "shell", "zsh", source="user")
    client.set_fact("profile", "name", "Ada")
    client.flush()
    assert [(f.category, f.key, f.value, f.source) for f in client.facts()] == [
        ("prefs", "editor", "vim", "agent"), ("prefs", "shell", "zsh", "user"),
        ("profile", "name", "Ada", "agent")]
    assert [f.key for f in client.facts("prefs")] == ["editor", "shell"]
    client.set_fact("prefs", "editor", "helix")
    client.delete_fact("profile", "name")
    client.flush()
    editor = client.facts("prefs")[0]
    assert (editor.value, editor.created_at < editor.updated_at) == ("helix", True)
    assert client.facts("profile") == []


@pytest.mark.remote_too
def test_agent_cannot_overwrite_a_user_fact_unless_forced(client: MemoryClient) -> None:
    client.set_fact("prefs", "editor", "vim", source="user")
    ignored = client.set_fact("prefs", "editor", "emacs")  # an agent's guess
    client.delete_fact("prefs", "editor")                  # and an agent's deletion
    client.flush()
    assert [(f.value, f.source) for f in client.facts("prefs")] == [("vim", "user")]
    forced = client.set_fact("prefs", "editor", "emacs", force=True)
    client.set_fact("prefs", "editor", "nano")  # the person's override is protected too
    client.flush()
    assert [(f.value, f.source) for f in client.facts("prefs")] == [("emacs", "user")]
    history = client.fact_history("prefs", "editor")
    assert [(c.action, c.value, c.source, c.applied) for c in history] == [
        ("set", "vim", "user", True), ("set", "emacs", "agent", False),
        ("deleted", None, "agent", False), ("set", "emacs", "user", True),
        ("set", "nano", "agent", False)]
    assert (history[1].event_id, history[3].event_id) == (ignored, forced)
    assert history[3].force is True


@pytest.mark.remote_too
def test_own_changes_are_read_before_the_writer_commits_them(
    client: MemoryClient, writer: WriterThread
) -> None:
    client.set_fact("prefs", "shell", "zsh", source="user")
    client.set_fact("prefs", "theme", "dark")
    client.flush()
    writer.stop()  # from here on nothing is committed: every read is this client's overlay
    client.set_fact("prefs", "editor", "vim")
    client.set_fact("prefs", "theme", "light")
    client.set_fact("prefs", "shell", "bash")          # guarded: the user's value stays
    client.set_fact("profile", "name", "Ada")
    client.delete_fact("profile", "name")              # right after set_fact
    shown = [(f.key, f.value, f.source, f.id == 0) for f in client.facts()]
    assert shown == [("editor", "vim", "agent", True), ("shell", "zsh", "user", False),
                     ("theme", "light", "agent", False)]
    assert [f.key for f in client.facts("profile")] == []
    writer.start()
    client.flush()
    committed = [(f.key, f.value, f.source) for f in client.facts()]
    assert committed == [(key, value, source) for key, value, source, _ in shown]
    assert all(f.id > 0 for f in client.facts())


@pytest.mark.remote_too
def test_a_fact_over_time_as_its_agent_sees_it(client: MemoryClient) -> None:
    """A move learned late: the old value was true until the move, the new one since;
    each client asks what was true on a day, and sees both clocks in the history."""
    client.set_fact("home", "city", "Lisbon", user_id="alice",
                    valid_from=datetime(2026, 1, 1, tzinfo=UTC))
    client.set_fact("home", "city", "Porto", user_id="alice", valid_from="2026-06-01T00:00:00Z")
    client.flush()
    def then(day: str) -> list[str]:
        return [f.value for f in client.facts(user_id="alice", as_of=f"{day}T12:00:00Z")]
    assert then("2025-12-31") == []
    assert then("2026-03-01") == ["Lisbon"]
    assert then("2026-07-01") == ["Porto"]
    [now] = client.facts(user_id="alice")
    assert (now.value, now.valid_from, now.valid_to) == ("Porto", "2026-06-01T00:00:00.000000Z",
                                                         None)
    history = client.fact_history("home", "city", user_id="alice")
    assert [(c.value, c.valid_from, c.valid_to) for c in history] == [
        ("Lisbon", "2026-01-01T00:00:00.000000Z", "2026-06-01T00:00:00.000000Z"),
        ("Porto", "2026-06-01T00:00:00.000000Z", None)]
    client.delete_fact("home", "city", user_id="alice", valid_to="2026-09-01T00:00:00Z")
    client.flush()
    assert then("2026-08-31") == ["Porto"]
    assert then("2026-09-02") == []
    with pytest.raises(ValidationError, match="as_of"):
        client.facts(as_of="last tuesday")
    with pytest.raises(ValidationError, match="valid_from"):
        client.set_fact("home", "city", "Faro", valid_from="soon")


def test_with_pending_facts_applies_in_order_under_the_guard() -> None:
    def change(etype: str, key: str, value: str | None = None, source: str = "agent",
               force: bool = False) -> Event:
        payload = {"category": "c", "key": key, "source": source,
                   **({"value": value} if value is not None else {}),
                   **({"force": True} if force else {})}
        return Event(id=uuid7(), type=etype, session_id=None, created_at=f"t-{key}-{value}",
                     payload=payload)

    users = Fact(7, "c", "u", "mine", "user", "t0", "t0")
    pending = [change(EventType.FACT_SET, "u", "agent's"),
               change(EventType.FACT_DELETED, "u"),
               change(EventType.FACT_SET, "a", "1"), change(EventType.FACT_SET, "a", "2"),
               change(EventType.FACT_SET, "u", "forced", force=True)]
    shown = with_pending_facts([users], pending)
    assert [(f.key, f.value, f.id, f.created_at) for f in shown] == [
        ("a", "2", 0, "t-a-1"), ("u", "forced", 7, "t0")]
    assert with_pending_facts([], pending, "other") == []  # committed: already filtered


@pytest.mark.remote_too
def test_history_survives_deletion(client: MemoryClient, config: Config) -> None:
    for value in ["a", "b", "c"]:
        client.set_fact("notes", "k", value)
    client.delete_fact("notes", "k", source="user")
    client.flush()
    assert client.facts("notes") == []
    assert [(c.action, c.value) for c in client.fact_history("notes", "k")] == [
        ("set", "a"), ("set", "b"), ("set", "c"), ("deleted", None)]
    checked = subprocess.run(memq_command("rebuild", "--check", "--db", config.db_path),
                             capture_output=True, text=True, cwd=ROOT, check=False)
    assert (checked.returncode, checked.stdout.strip()) == (0, "projections match the log")


BAD_CALLS: list[tuple[str, tuple[Any, ...], dict[str, Any], str]] = [
    ("set_fact", (1, "k", "v"), {}, "category must be a string, got int"),
    ("set_fact", ("", "k", "v"), {}, "category must not be empty"),
    ("set_fact", ("c", "k" * 201, "v"), {}, "key is 201 characters, over the 200 limit"),
    ("set_fact", ("c", "a\tb", "v"), {}, "key contains a control character"),
    ("set_fact", ("c", "k", 3), {}, "value must be a string, got int"),
    ("set_fact", ("c", "k", "  "), {}, "value must not be empty"),
    ("set_fact", ("c", "k", "x" * 70_000), {}, "over the 65536 byte limit"),
    ("set_fact", ("c", "k", "v", "robot"), {}, "source must be one of agent, user, got 'robot'"),
    ("set_fact", ("c", "k", "v", ["user"]), {}, "source must be one of agent, user"),
    ("set_fact", ("c", "k", "v"), {"force": "yes"}, "force must be True or False, got 'yes'"),
    ("delete_fact", (None, "k"), {}, "category must be a string, got NoneType"),
    ("delete_fact", ("c", " "), {}, "key must not be empty"),
    ("delete_fact", ("c", "k", "admin"), {}, "source must be one of agent, user"),
    ("delete_fact", ("c", "k"), {"force": 1}, "force must be True or False, got 1"),
    ("facts", (7,), {}, "category must be a string, got int"),
    ("facts", ("",), {}, "category must not be empty"),
    ("fact_history", ("c", None), {}, "key must be a string, got NoneType"),
    ("fact_history", ("c\x00", "k"), {}, "category contains a control character"),
]


@pytest.mark.parametrize(("method", "args", "kwargs", "message"), BAD_CALLS,
                         ids=[f"{m}-{msg[:30]}" for m, _, _, msg in BAD_CALLS])
def test_bad_arguments(idle_client: MemoryClient, method: str, args: tuple[Any, ...],
                       kwargs: dict[str, Any], message: str) -> None:
    with pytest.raises(ValidationError) as caught:
        getattr(idle_client, method)(*args, **kwargs)
    assert message in str(caught.value)
    assert inbox_entries(idle_client.redis) == 0  # nothing was sent
    assert idle_client.outbox.last_sent is None


def test_public_names() -> None:
    for name in memq.__all__:
        assert getattr(memq, name) is not None, name
    for method in ["set_fact", "delete_fact", "facts", "fact_history", "record_tool_call",
                   "suggest_next_tools", "use_macro", "allow_prefix", "revoke_prefix",
                   "allowed_prefixes", "is_command_allowed"]:
        assert callable(getattr(MemoryClient, method)), method


def test_get_context_includes_relevant_facts_when_configured(
    config: Config, writer: object
) -> None:
    on = config.replace(retrieval=RetrievalConfig(include_facts=True, facts_limit=2))
    with MemoryClient(config=on) as client:
        client.set_fact("travel", "airline", "prefers TAP to Lisbon", source="user")
        client.set_fact("food", "diet", "vegetarian", source="user")
        client.append("s1", "user", "hello")
        client.flush()
        items = client.get_context("s1")  # no query: no facts
        assert [i.branches for i in items] == [("recency",)]
        facts = [i for i in client.get_context("s1", "which airline to Lisbon?")
                 if i.branches == ("fact",)]
        assert [f.content for f in facts] == ["travel/airline: prefers TAP to Lisbon"]
        assert facts[0].id.startswith("fact:")
    with MemoryClient(config=config) as client:  # off by default
        assert all(i.branches != ("fact",) for i in client.get_context("s1", "airline Lisbon"))
