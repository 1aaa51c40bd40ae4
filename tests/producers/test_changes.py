"""The change feed from a client: page after page of what was committed, each change once,
filtered by type and user; waits for a commit; the keys' own events only for the person."""

from __future__ import annotations

import itertools
import threading

import pytest

from memq import MemoryClient
from memq.authority import Role
from memq.config import Config
from memq.errors import FeedExpired, ValidationError
from tests.conftest import write_directly

pytestmark = [pytest.mark.redis]


@pytest.mark.remote_too
def test_a_follower_sees_every_change_once_in_commit_order(client: MemoryClient) -> None:
    client.append("s1", "user", "book a flight", user_id="alice")
    client.set_fact("prefs", "seat", "window", user_id="alice")
    client.append("s2", "user", "bob's turn", user_id="bob")
    client.flush()
    seen = list(client.changes(follow=False))
    assert [c.type for c in seen] == ["message.appended", "fact.set", "message.appended"]
    assert [c.position for c in seen] == sorted({c.position for c in seen})
    assert seen[0].data is not None
    assert seen[0].data["content"] == "book a flight"
    later = list(client.changes(after=seen[0].position, follow=False))
    assert later == seen[1:]
    assert [c.user_id for c in client.changes(user_id="bob", follow=False)] == ["bob"]
    facts = list(client.changes(types=["fact.*"], follow=False))
    assert [c.data["value"] for c in facts if c.data] == ["window"]


@pytest.mark.remote_too
def test_a_page_waits_for_a_commit_and_says_where_to_go_on(client: MemoryClient) -> None:
    client.append("s1", "user", "first")
    client.flush()
    page = client.changes_page(limit=10)
    assert page.position == page.newest == page.changes[-1].position
    empty = client.changes_page(page.position, wait=0.0)
    assert (empty.changes, empty.position) == ([], page.position)
    later = threading.Timer(0.2, lambda: (client.append("s1", "user", "second"),
                                          client.flush()))
    later.start()
    waited = client.changes_page(page.position, wait=10.0)
    later.join()  # its flush may still be on the wire when the page has come back
    assert [c.data["content"] for c in waited.changes if c.data] == ["second"]


def test_a_filtered_page_still_moves_the_position(client: MemoryClient) -> None:
    for i in range(5):
        client.append("s1", "user", f"turn {i}")
    client.flush()
    page = client.changes_page(types=["task.fired"], limit=3)
    assert page.changes == []
    assert page.position == 3  # the next page starts past what this one skipped
    assert list(client.changes(types=["task.fired"], follow=False)) == []


def test_a_forget_is_a_change_and_the_forgotten_is_gone(client: MemoryClient) -> None:
    client.append("s1", "user", "my passport number is X123")
    client.flush()
    client.wait_forgotten(client.forget_session("s1"))
    seen = list(client.changes(follow=False))
    assert [(c.type, c.data) for c in seen] == [("message.appended", None),
                                                ("session.forgotten", {})]
    assert "X123" not in repr(seen)


def test_keys_events_are_the_persons_alone(config: Config, writer: object,
                                           role_urls: dict[Role, str]) -> None:
    with MemoryClient(config=config.replace(redis_url=role_urls[Role.ADMIN])) as person, \
            MemoryClient(config=config.replace(redis_url=role_urls[Role.AGENT])) as agent:
        person.create_key("bot", users=["alice"])
        person.flush()
        assert [c.type for c in person.changes(follow=False)] == ["key.created"]
        assert list(agent.changes(follow=False)) == []


@pytest.mark.parametrize("bad", [
    {"after": -1}, {"after": "3"}, {"after": True}, {"types": "fact.*"}, {"types": [""]},
    {"limit": 0}, {"limit": 1001}, {"limit": 1.5}, {"limit": 200.0}, {"wait": 31},
    {"wait": float("nan")},
    {"user_id": "a\x00b"}])
def test_bad_arguments_are_refused_by_name(client: MemoryClient, bad: dict[str, object]
                                           ) -> None:
    with pytest.raises(ValidationError, match=next(iter(bad))):
        client.changes_page(**bad)  # type: ignore[arg-type]


def test_a_follower_behind_retention_is_told_where_to_start(client: MemoryClient,
                                                            config: Config) -> None:
    client.append("s1", "user", "old")
    client.flush()
    # the horizon as retention leaves it (tests/store/test_changes.py)
    write_directly(config.db_path, "INSERT INTO feed_horizon (id, seq) VALUES (1, 1)")
    with pytest.raises(FeedExpired, match="position 0 is behind the feed") as expired:
        client.changes_page(0)
    assert expired.value.horizon == 1
    assert client.changes_page(1).changes == []


def test_a_follower_restarted_from_its_position_misses_nothing_under_load(
        client: MemoryClient, config: Config) -> None:
    """A writer committing while a follower stops at random places and starts again from
    the last position it handled: every change once, in order."""
    done = threading.Event()

    def load() -> None:
        with MemoryClient(config=config) as other:
            for i in itertools.count():
                if done.is_set():
                    break
                other.append(f"s{i % 3}", "user", f"turn {i}")
                done.wait(0.002)  # a steady load, not all the CPU the suite shares
            other.flush()

    thread = threading.Thread(target=load)
    thread.start()
    handled: list[int] = []
    try:
        for stop_after in (3, 17, 1, 40, 8):
            after = handled[-1] if handled else None
            for change in client.changes(after=after, wait=1.0):
                handled.append(change.position)
                if len(handled) % stop_after == 0:
                    break  # the follower is killed here; its position is kept
    finally:
        done.set()
        thread.join()
    handled.extend(c.position for c in client.changes(after=handled[-1], follow=False))
    assert handled == sorted(set(handled))
    assert handled == [c.position for c in client.changes(follow=False)]
