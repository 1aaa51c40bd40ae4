"""Sessions through the client: owners fixed at the first append, listed by activity."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from memq import MemoryClient, names
from memq.config import Config
from memq.errors import EventsRejected, ValidationError
from memq.inbox import inbox_marks
from memq.testing import WriterThread

pytestmark = pytest.mark.redis

T0 = datetime(2026, 3, 1, 9, 0, tzinfo=UTC)


def at(minutes: int) -> datetime:
    return T0 + timedelta(minutes=minutes)


def test_an_append_naming_another_user_raises_and_sends_nothing(client: MemoryClient) -> None:
    client.append("s1", "user", "hello", user_id="u1", agent_id="support")
    client.append("s1", "assistant", "hi")  # inherits u1 / support
    sent = reached(client)
    for owner, message in [({"user_id": "u2"}, "belongs to user 'u1'"),
                           ({"agent_id": "sales"}, "belongs to agent 'support'")]:
        with pytest.raises(ValidationError, match=message):
            client.append("s1", "user", "not yours", **owner)
    assert reached(client) == sent
    client.flush()
    [info] = client.sessions()
    assert (info.user_id, info.agent_id, info.message_count) == ("u1", "support", 2)


def reached(client: MemoryClient) -> dict[str, tuple[int, int]]:
    """How far every inbox reaches, not what it holds (the writer is taking entries out);
    an empty stream the writer made for its consumer group (at 0-0) reaches nothing."""
    return {name: mark for name, mark in inbox_marks(client.redis).items() if mark != (0, 0)}


def test_a_batch_refused_half_way_claims_no_session(client: MemoryClient) -> None:
    """Nothing was sent: the first turn's owner must not decide the session's next turn."""
    client.append("mine", "user", "hello", user_id="u1")
    with pytest.raises(ValidationError, match="belongs to user 'u1'"):
        client.append_many([
            {"session_id": "fresh", "role": "user", "content": "never sent", "user_id": "u1"},
            {"session_id": "mine", "role": "user", "content": "x", "user_id": "u2"},
        ])
    client.append("fresh", "user", "the first turn sent", user_id="u2")
    client.flush()
    assert [(s.session_id, s.user_id) for s in client.sessions(user_id="u2")] == [
        ("fresh", "u2")]


@pytest.mark.remote_too
def test_another_process_learns_the_owner_from_the_database(
    client: MemoryClient, config: Config
) -> None:
    client.append("s1", "user", "hello", user_id="u1")
    client.flush()
    with MemoryClient(config=config) as other:
        with pytest.raises(ValidationError, match="belongs to user 'u1'"):
            other.append("s1", "user", "mine now", user_id="u2")
        other.append("s1", "user", "same user", user_id="u1")
        other.flush()
    assert [m.content for m in client.history("s1")] == ["hello", "same user"]


def test_a_race_between_two_owners_is_settled_by_the_writer(config: Config) -> None:
    """Neither client can know of the other's append: the writer is stopped between them.

    With the writer running, it could commit the first append before the second client
    looks the session up, and the second append was then refused at once (a
    ValidationError, the other correct outcome) instead of at flush: that timing made this
    test fail under load. Here the race is certain, and the writer settles it."""
    # the database exists, with another session in it
    with WriterThread(config), MemoryClient(config=config) as setup:
        setup.append("other", "user", "unrelated", user_id="u3")
        setup.flush()
    with MemoryClient(config=config) as first, MemoryClient(config=config) as second:
        first.append("s1", "user", "first", user_id="u1")
        second.append("s1", "user", "second", user_id="u2")  # neither knows of the other
        with WriterThread(config):
            first.flush()
            with pytest.raises(EventsRejected, match="belongs to user 'u1', not to user 'u2'"):
                second.flush()  # the caller of the losing append sees why
            assert [m.content for m in first.history("s1")] == ["first"]
            assert {s.session_id: s.user_id for s in first.sessions()} == {
                "s1": "u1", "other": "u3"}


@pytest.mark.remote_too
def test_sessions_are_listed_newest_first_with_counts(client: MemoryClient) -> None:
    for session, user, agent, minutes in [("a", "u1", "x", [1, 2, 9]), ("b", "u1", None, [5]),
                                          ("c", "u2", "x", [7, 8]), ("d", None, None, [3])]:
        for m in minutes:
            client.append(session, "user", f"turn {m}", created_at=at(m), user_id=user,
                          agent_id=agent)
    client.flush()
    listed = client.sessions()
    assert [(s.session_id, s.message_count) for s in listed] == [
        ("a", 3), ("c", 2), ("b", 1), ("d", 1)]
    assert listed[0].started_at < listed[0].last_active_at
    assert [s.session_id for s in client.sessions(user_id="u1")] == ["a", "b"]
    assert [s.session_id for s in client.sessions(agent_id="x")] == ["a", "c"]
    assert [s.session_id for s in client.sessions("u2", "x")] == ["c"]
    page = client.sessions(limit=2)
    rest = client.sessions(limit=2, before=page[-1].last_active_at)
    assert [s.session_id for s in page + rest] == ["a", "c", "b", "d"]
    assert [s.session_id for s in client.sessions(before=at(8))] == ["b", "d"]


@pytest.mark.parametrize(("kwargs", "message"), [
    ({"limit": 0}, "limit must be an integer from 1 to 10000"),
    ({"limit": True}, "limit must be an integer"),
    ({"user_id": ""}, "user_id must not be empty"),
    ({"agent_id": "a\nb"}, "agent_id contains a control character"),
    ({"before": "yesterday"}, "before must be an RFC3339 string"),
    ({"before": datetime(2026, 1, 1)}, "has no time zone"),
])
@pytest.mark.remote_too
def test_bad_listing_arguments(idle_client: MemoryClient, kwargs: dict[str, Any],
                               message: str) -> None:
    with pytest.raises(ValidationError, match=message):
        idle_client.sessions(**kwargs)


@pytest.mark.remote_too
def test_user_facts_through_the_client(client: MemoryClient) -> None:
    client.set_fact("prefs", "editor", "vim")
    client.set_fact("prefs", "editor", "nano", user_id="u1")
    client.set_fact("prefs", "editor", "emacs", user_id="u2", source="user")
    client.flush()
    assert [(f.user_id, f.value) for f in client.facts(user_id="u1")] == [
        (None, "vim"), ("u1", "nano")]
    assert [(f.user_id, f.value) for f in client.facts()] == [(None, "vim")]
    client.delete_fact("prefs", "editor", user_id="u1")
    client.set_fact("prefs", "editor", "ed", user_id="u2")  # the user's value is protected
    client.flush()
    assert [f.value for f in client.facts("prefs", user_id="u1")] == ["vim"]
    assert [f.value for f in client.facts(user_id="u2")] == ["vim", "emacs"]
    assert [c.value for c in client.fact_history("prefs", "editor", user_id="u2")] \
        == ["emacs", "ed"]


IDS = st.one_of(st.text(max_size=12), st.integers(), st.none(),
                st.sampled_from(["", " \t", "a\nb", "x" * 300, "\ud800", "ok-id"]))
GENERATED = settings(max_examples=60, deadline=None, derandomize=True,
                     suppress_health_check=[HealthCheck.function_scoped_fixture])


def sent_count(client: MemoryClient) -> int:
    return sum(client.outbox.redis.xlen(stream) for stream in names.INBOX_STREAMS)


@GENERATED
@given(session_id=IDS, message_id=IDS)
@example(session_id="s1", message_id="")
@example(session_id="s\x00", message_id="m1")
def test_forget_message_refuses_a_bad_id_naming_it_and_sends_nothing(
    idle_client: MemoryClient, session_id: Any, message_id: Any
) -> None:
    before = sent_count(idle_client)
    try:
        idle_client.forget_message(session_id, message_id)
        refused = None
    except ValidationError as exc:
        refused = str(exc)
    bad = [name for name, value in (("session_id", session_id), ("message_id", message_id))
           if not _valid_id(value, 200)]
    if bad:
        assert refused is not None
        assert refused.startswith(bad[0]), refused  # the first bad one, by its name
        assert sent_count(idle_client) == before
    else:
        assert refused is None
        assert sent_count(idle_client) == before + 1


def _valid_id(value: Any, max_chars: int) -> bool:
    """What an id must be, stated apart from the code that checks it."""
    return (isinstance(value, str) and bool(value.strip()) and len(value) <= max_chars
            and not any(ord(c) < 0x20 or 0x7F <= ord(c) <= 0x9F or 0xD800 <= ord(c) <= 0xDFFF
                        for c in value))  # no C0 or C1 control, no lone surrogate
