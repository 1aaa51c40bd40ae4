"""``GET /v1/changes``: the change feed as server-sent events, resumed with
``Last-Event-ID``, cut to the caller's key, ended when the key is revoked."""

from __future__ import annotations

import contextlib
import itertools
import threading
import time
from collections.abc import Iterator
from typing import Any

import httpx
import numpy as np
import orjson
import pytest
import redis

from memq import MemoryClient, RemoteMemoryClient
from memq.config import Config
from tests.conftest import write_directly
from tests.embedding_events import send_embeddings
from tests.producers.serving import Served
from tests.scheduled import eventually
from tests.server.conftest import key_for

pytestmark = [pytest.mark.redis]


def events(url: str, token: str, **options: Any) -> Iterator[tuple[str, str, Any]]:
    """(id, event, data) of each event of the stream, as a browser's EventSource reads it."""
    headers = {"Authorization": f"Bearer {token}", **options.pop("headers", {})}
    with httpx.stream("GET", f"{url}/v1/changes", headers=headers, params=options,
                      timeout=30) as answer:
        assert answer.status_code == 200, answer.read()
        assert answer.headers["content-type"].startswith("text/event-stream")
        fields: dict[str, str] = {}
        for line in answer.iter_lines():
            if line.startswith(":"):
                continue
            if line:
                name, _, value = line.partition(": ")
                fields[name] = value
                continue
            if fields:
                yield fields.get("id", ""), fields["event"], orjson.loads(fields["data"])
                fields = {}


def test_a_follower_resumed_with_its_last_event_id_misses_nothing(
        admin: RemoteMemoryClient, served: Served, config: Config) -> None:
    key = admin.create_key("follower", users=["alice"], can=["read", "write"])
    admin.flush()
    done = threading.Event()

    def load() -> None:
        with key_for(admin, served, users=["alice"]) as writer:
            for i in itertools.count():
                if done.is_set():
                    break
                writer.append(f"chat-{i % 2}", "user", f"turn {i}", user_id="alice")
                done.wait(0.002)  # a steady load, not all the CPU the suite shares
            writer.flush()

    thread = threading.Thread(target=load)
    thread.start()
    handled: list[int] = []
    try:
        for stop_after in (5, 2, 11, 7):
            headers = {"Last-Event-ID": str(handled[-1])} if handled else {}
            for position, kind, change in events(served.url, key.secret, headers=headers):
                assert kind == change["type"] == "message.appended"
                handled.append(int(position))
                if len(handled) % stop_after == 0:
                    break  # the connection drops here
    finally:
        done.set()
        thread.join()
    assert handled == sorted(set(handled))
    with RemoteMemoryClient(served.url, token=key.secret) as same:
        everything = [c.position for c in same.changes(follow=False)]
    assert everything[:len(handled)] == handled
    assert "bob" not in repr(everything)


def test_each_key_follows_only_its_grant_and_tenant(admin: RemoteMemoryClient,
                                                   served: Served) -> None:
    with key_for(admin, served, tenant="acme", can=["read", "write"]) as acme:
        acme.append("s1", "user", "acme's turn", user_id="alice")
        acme.set_fact("house", "rule", "acme's rule")
        acme.flush()
    alice = admin.create_key("alice", users=["alice"])
    acme_key = admin.create_key("acme", tenant="acme")
    admin.flush()
    seen = [(k, c["session_id"], c["user_id"]) for _, k, c in
            itertools.islice(events(served.url, acme_key.secret), 2)]
    assert seen == [("message.appended", "s1", "alice"), ("fact.set", None, None)]
    with RemoteMemoryClient(served.url, token=alice.secret) as default_alice:
        mine = list(default_alice.changes(follow=False))
    assert mine == []  # bob's turn and fact, acme's alice: none of them its alice's
    with RemoteMemoryClient(served.url, token=acme_key.secret) as whole_acme:
        assert [c.user_id for c in whole_acme.changes(follow=False)] == ["alice", None]


def test_a_revoked_keys_stream_ends_with_an_error_event(admin: RemoteMemoryClient,
                                                        served: Served) -> None:
    key = admin.create_key("short", users=["bob"])
    admin.flush()
    stream = events(served.url, key.secret)
    assert next(stream)[1] == "message.appended"  # bob's turn of the fixture
    admin.revoke_key(key.id)
    admin.flush()
    rest = list(stream)  # within one page's wait (10 s) at most
    assert [kind for _, kind, _ in rest] == ["fact.set", "error"]  # bob's fact, then the end
    assert rest[-1][2]["title"] == "AuthenticationFailed"


@pytest.mark.parametrize(("headers", "params", "status", "title"), [
    ({}, {"after": -1}, 422, "ValidationError"),
    ({"Last-Event-ID": "x"}, {}, 422, "ValidationError"),
    ({}, {"types": ""}, 422, "ValidationError"),
    ({}, {"user_id": "somebody"}, 404, "NotFound"),
])
def test_a_bad_request_is_answered_before_the_stream(
        admin: RemoteMemoryClient, served: Served, headers: dict[str, str],
        params: dict[str, Any], status: int, title: str) -> None:
    key = admin.create_key("k", users=["alice"])
    admin.flush()
    answer = httpx.get(f"{served.url}/v1/changes", params=params,
                       headers={"Authorization": f"Bearer {key.secret}", **headers})
    assert (answer.status_code, answer.json()["title"]) == (status, title), answer.text


@pytest.mark.parametrize("limit", [1.5, 200.9, 1.0000001, 100.0])
def test_a_page_limit_that_is_not_whole_is_the_callers_mistake(
        admin: RemoteMemoryClient, served: Served, limit: float) -> None:
    """SQLite refuses a LIMIT of 1.5, and that once came back as a database fault (503)."""
    key = admin.create_key("reader", users=["alice"], can=["read"])
    admin.flush()
    answer = httpx.post(f"{served.url}/v1/changes/page", json={"after": 0, "limit": limit},
                        headers={"Authorization": f"Bearer {key.secret}"})
    assert (answer.status_code, answer.json()["title"]) == (422, "ValidationError"), answer.text
    assert "limit must be an integer from 1 to" in answer.json()["detail"]


def test_no_token_no_feed_and_a_follower_behind_retention_gets_410(
        admin: RemoteMemoryClient, served: Served, config: Config) -> None:
    assert httpx.get(f"{served.url}/v1/changes").status_code == 401
    write_directly(config.db_path, "INSERT INTO feed_horizon (id, seq) VALUES (1, 2)")
    answer = httpx.get(f"{served.url}/v1/changes", params={"after": 1},
                       headers={"Authorization": f"Bearer {served.token()}"})
    assert (answer.status_code, answer.json()["horizon"]) == (410, 2), answer.text


# -- found by review: what the feed showed or let a key do ----------------------------------


def test_a_follower_of_alice_sees_her_session_forgotten(admin: RemoteMemoryClient,
                                                        served: Served) -> None:
    """The feed never shows what was forgotten, 'and the forget is a change of its own':
    a follower mirroring alice's data must learn that her session went."""
    with key_for(admin, served, users=["alice"], can=["read", "write", "forget"]) as alice:
        alice.append("trip", "user", "alice's trip", user_id="alice")
        alice.flush()
        before = [c.type for c in alice.changes(follow=False)]
        position = alice.changes_page(limit=1).newest  # the follower is up to date
        alice.forget_session("trip")
        alice.flush()
        seen = [c.type for c in alice.changes(position, follow=False)]
    by_user = [c.type for c in admin.changes(position, user_id="alice", follow=False)]
    everything = [c.type for c in admin.changes(position, follow=False)]
    assert before == ["message.appended"]
    assert everything == ["session.forgotten"]
    assert (seen, by_user) == (["session.forgotten"], ["session.forgotten"])


def test_a_default_tenant_key_sees_nothing_of_another_tenants_in_the_feed(
        admin: RemoteMemoryClient, served: Served, config: Config) -> None:
    with key_for(admin, served, tenant="acme", can=["read", "write"]) as acme:
        message = acme.append("s1", "user", "acme's secret merger", user_id="alice")
        acme.flush()
    with MemoryClient(config=config) as worker:  # the embed worker's result for it
        send_embeddings(worker, [message], np.full((1, 384), 384 ** -0.5, dtype=np.float32))
    with key_for(admin, served, can=["read"]) as default_key:  # every user of 'default'
        leaked = [(c.type, c.data) for c in default_key.changes(follow=False)
                  if c.data and message in str(c.data)]
    assert leaked == [], leaked[0][0]


def test_a_tenant_keys_feed_data_is_in_its_own_names(admin: RemoteMemoryClient,
                                                     served: Served) -> None:
    with key_for(admin, served, tenant="acme", users=["alice"]) as acme:
        acme.append("s1", "user", "hello", user_id="alice", agent_id="a1")
        acme.set_fact("diet", "likes", "figs", user_id="alice")
        acme.flush()
        data = [(c.user_id, c.data["user_id"]) for c in acme.changes(follow=False)]
    assert data == [("alice", "alice"), ("alice", "alice")]


def test_an_odd_last_event_id_is_a_422_not_a_500(admin: RemoteMemoryClient,
                                                 served: Served) -> None:
    key = admin.create_key("k", users=["alice"])
    admin.flush()
    answer = httpx.get(f"{served.url}/v1/changes",
                       headers={"Authorization": f"Bearer {key.secret}",
                                "Last-Event-ID": b"\xb2"})  # latin-1 '²': isdigit() is True
    assert answer.status_code == 422, (answer.status_code, answer.text)


def test_waiting_feed_pages_of_three_small_keys_do_not_stall_the_server(
        admin: RemoteMemoryClient, served: Served) -> None:
    secrets = [admin.create_key(f"k{i}", users=[f"u{i}"], can=["read"]).secret
               for i in range(3)]
    admin.flush()
    newest = admin.changes_page(limit=1).newest

    def hold(secret: str) -> None:
        with contextlib.suppress(httpx.HTTPError):
            httpx.post(f"{served.url}/v1/changes/page", timeout=40,
                       headers={"Authorization": f"Bearer {secret}"},
                       json={"after": newest, "wait": 30})

    threads = [threading.Thread(target=hold, args=(s,), daemon=True)
               for s in secrets for _ in range(16)]  # each key's own key_concurrent
    for thread in threads:
        thread.start()
    time.sleep(1)  # the 48 pages are waiting (each up to 30 s)
    # Answered while they wait (the timeout only keeps a stalled server from hanging the
    # suite): a waiting page holds no thread of the server's pool.
    answer = httpx.get(f"{served.url}/v1/sessions", timeout=15,
                       headers={"Authorization": f"Bearer {served.token()}"})
    assert answer.status_code == 200, answer.text
    admin.append("wake", "user", "a commit: every waiting page moves past it and answers")
    admin.flush()
    for thread in threads:
        thread.join(30)
    assert not any(thread.is_alive() for thread in threads)


def test_an_open_feed_is_one_of_its_keys_calls_for_as_long_as_it_is_open(
        admin: RemoteMemoryClient, served: Served, redis_url: str) -> None:
    """A review found 8 streams open at once for a key limited to 1 call at once, and an
    ordinary key's 1,162 streams slowing every other key's calls: a stream spent one unit
    on its first look and was not a call running after it."""
    made = admin.create_key("streams", users=["alice"], concurrent=2)
    admin.flush()
    running = f"memq:running:{made.id}"
    broker = redis.Redis.from_url(redis_url)
    with httpx.Client(base_url=served.url, timeout=30,
                      headers={"Authorization": f"Bearer {made.secret}"}) as client:
        with client.stream("GET", "/v1/changes") as first, \
                client.stream("GET", "/v1/changes") as second:
            assert (first.status_code, second.status_code) == (200, 200)
            assert broker.get(running) == b"2"
            with client.stream("GET", "/v1/changes") as third:
                assert third.status_code == 429, third.read()
                assert third.headers["retry-after"] == "1"
            page = client.post("/v1/changes/page", json={"after": 0, "wait": 0})
            assert page.status_code == 429  # its other calls wait for a place too
        # Closed: its places come back once the server sees the callers gone.
        eventually(lambda: broker.get(running) == b"0", "the streams' places to come back")
        with client.stream("GET", "/v1/changes") as again:
            assert again.status_code == 200


def test_a_page_waiting_for_a_commit_is_one_of_its_keys_calls(
        admin: RemoteMemoryClient, served: Served, redis_url: str) -> None:
    made = admin.create_key("poller", users=["alice"], concurrent=1)
    admin.flush()
    broker = redis.Redis.from_url(redis_url)
    headers = {"Authorization": f"Bearer {made.secret}"}
    newest = httpx.post(f"{served.url}/v1/changes/page", json={"after": 0, "wait": 0},
                        headers={"Authorization": f"Bearer {served.token()}"}).json()
    after = next(iter(newest.values()))["newest"]
    waited: list[httpx.Response] = []
    poll = threading.Thread(target=lambda: waited.append(httpx.post(
        f"{served.url}/v1/changes/page", headers=headers, timeout=40,
        json={"after": after, "wait": 30})))
    poll.start()
    # The key's first call: its place is taken in Redis (then kept on its server).
    eventually(lambda: broker.get(f"memq:running:{made.id}") == b"1", "the poll to wait")
    refused = httpx.post(f"{served.url}/v1/changes/page", headers=headers,
                         json={"after": after, "wait": 0})
    assert refused.status_code == 429
    admin.append("alice-chat", "user", "wakes the poll", user_id="alice")
    poll.join()
    assert waited[0].status_code == 200
    again = httpx.post(f"{served.url}/v1/changes/page", headers=headers,
                       json={"after": after, "wait": 0})
    assert again.status_code == 200  # the poll's place came free for the key's next call
