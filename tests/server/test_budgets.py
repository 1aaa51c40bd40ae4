"""A key's budget and its calls at once, counted in Redis for every server together."""

from __future__ import annotations

import dataclasses
import secrets
import socket
import subprocess
import sys
import threading
import time
from urllib.parse import urlsplit

import httpx
import pytest
import redis
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from memq import MemoryClient, RemoteMemoryClient, names
from memq.authority import Role
from memq.config import Config
from memq.errors import RateLimited
from memq.server.budgets import BURST_S, MAX_WAITING, RUNNING_TTL_S, Budgets, cost
from memq.server.principals import Grant
from tests.conftest import ROOT
from tests.producers.serving import Served
from tests.scheduled import eventually
from tests.server.conftest import key_for

pytestmark = [pytest.mark.redis]


def grant(key_id: str = "0123456789abcdef", **budget: int) -> Grant:
    return Grant(key_id, frozenset({"alice"}), None, frozenset({"read"}), **budget)


def test_a_call_beyond_the_keys_calls_at_once_is_refused_and_gives_its_place_back(
    redis_url: str
) -> None:
    budgets = Budgets(redis.Redis.from_url(redis_url), redis_url, units_per_s=1000,
                      concurrent=2)
    other = Budgets(redis.Redis.from_url(redis_url), redis_url, units_per_s=1000,
                    concurrent=2)  # another server of the same Redis
    with budgets.spend(grant(), 1), other.spend(grant(), 1):
        with pytest.raises(RateLimited, match="calls running"), budgets.spend(grant(), 1):
            pass
        with budgets.spend(grant(concurrent=3), 1):  # the key's own bound
            pass
    with budgets.spend(grant(), 1), budgets.spend(grant(), 1):
        pass  # every place came back, the refused call's too
    with budgets.spend(None, 10**9):
        pass  # a shared token is never counted


def test_a_held_place_counts_with_the_keys_calls_and_spends_nothing(redis_url: str) -> None:
    budgets = Budgets(redis.Redis.from_url(redis_url), redis_url, units_per_s=1,
                      concurrent=1)
    key = grant(key_id=secrets.token_hex(8))
    with budgets.holding(key):  # a body arriving, a feed open
        with pytest.raises(RateLimited, match="calls running"), budgets.spend(key, 1):
            pass
        with pytest.raises(RateLimited, match="calls running"), budgets.holding(key):
            pass
        with budgets.spend(key, 1, held=True):  # the holder's own look: its units alone
            pass
    with budgets.holding(key), budgets.holding(grant(key_id=secrets.token_hex(8))):
        pass  # its place came back; another key's places are its own


def test_a_call_costing_more_than_a_seconds_budget_is_never_let_in(redis_url: str) -> None:
    budgets = Budgets(redis.Redis.from_url(redis_url), redis_url, units_per_s=10,
                      concurrent=16)
    with pytest.raises(RateLimited, match="more than this key's budget of 10 a second"), \
            budgets.spend(grant(), 11):
        pass
    with pytest.raises(RateLimited, match="budget of 5 a second"), \
            budgets.spend(grant(units_per_s=5), 6):
        pass
    assert budgets.spent(grant(units_per_s=5))  # the next ones like it: refused at the door


def test_a_key_spends_a_seconds_budget_at_once_then_at_its_rate(redis_url: str) -> None:
    connection = redis.Redis.from_url(redis_url)
    budgets = Budgets(connection, redis_url, units_per_s=10, concurrent=16)
    key = grant(key_id=secrets.token_hex(8))
    with budgets.spend(key, 10):  # after a pause, a second's budget at once
        pass
    paid = connection.get(f"memq:budget:{key.key_id}")
    with pytest.raises(RateLimited,
                       match=r"over its budget of 10 units a second .*retry in 0\.\d\d s"), \
            budgets.spend(key, 1):
        pass
    # A refused call spends nothing: the caller's next try is judged as if it had not.
    assert connection.get(f"memq:budget:{key.key_id}") == paid


@settings(max_examples=25, deadline=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(costs=st.lists(st.integers(1, 25), min_size=1, max_size=40))
def test_no_key_is_let_spend_more_than_its_rate_and_one_seconds_burst(
    redis_url: str, costs: list[int]
) -> None:
    limit = 50  # 20 ms a unit: no rounding
    budgets = Budgets(redis.Redis.from_url(redis_url), redis_url, units_per_s=limit,
                      concurrent=16)
    key, let_in = grant(key_id=secrets.token_hex(8)), []
    started = time.monotonic()
    for units in costs:
        try:
            with budgets.spend(key, units):
                let_in.append(units)
        except RateLimited:
            let_in.append(0)
    elapsed = time.monotonic() - started
    assert sum(let_in) <= limit * (elapsed + BURST_S)
    # A fresh key's calls are let in as long as together they fit one second's budget.
    fitting = next((i for i in range(len(costs)) if sum(costs[:i + 1]) > limit), len(costs))
    assert let_in[:fitting] == costs[:fitting]


def test_a_write_costs_its_events() -> None:
    assert cost("append_many", {"turns": [{}] * 100}, writes=True) == 100
    assert cost("append_many", {"turns": "not a list"}, writes=True) == 1
    assert cost("get_context", {"session_id": "s"}, writes=False) == 1


def test_over_http_a_spent_key_gets_429_with_retry_after(
    admin: RemoteMemoryClient, served: Served
) -> None:
    made = admin.create_key("small", users=["alice"], units_per_s=3)
    admin.flush()
    turns = [{"session_id": "a", "role": "user", "content": f"t{i}"} for i in range(4)]
    answer = httpx.post(f"{served.url}/v1/messages/batch", json={"messages": turns},
                        headers={"Authorization": f"Bearer {made.secret}"})
    assert answer.status_code == 429, answer.text
    assert answer.headers["retry-after"] == "1"
    assert answer.json()["title"] == "RateLimited"
    with key_for(admin, served, users=["alice"]) as roomy:
        assert roomy.append_many(turns[:3])  # another key's budget is its own


def test_what_a_server_saw_of_a_keys_budget_refuses_its_calls_before_their_body(
    redis_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    budgets = Budgets(redis.Redis.from_url(redis_url), redis_url, units_per_s=10,
                      concurrent=16)
    other = Budgets(redis.Redis.from_url(redis_url), redis_url, units_per_s=10,
                    concurrent=16)  # another server of the same Redis
    key = grant(key_id=secrets.token_hex(8))
    assert not other.spent(key)
    with budgets.spend(key, 9):
        pass
    with other.spend(key, 1):  # its own call reads the total of every server
        pass
    now = time.monotonic()
    monkeypatch.setattr("memq.server.budgets.time.monotonic", lambda: now)
    assert other.spent(key)  # what the guard asks before reading a body: no room for 1
    assert budgets.spent(key)  # its smallest call here, 9, has no room either
    assert not other.spent(None)
    monkeypatch.setattr("memq.server.budgets.time.monotonic", lambda: now + 0.15)
    assert not other.spent(key)  # 100 ms a unit: room for one again
    assert budgets.spent(key)  # not yet for 9


@pytest.mark.parametrize(("concurrent", "refused"), [
    (1, "calls running"),  # its own bound, counted in Redis for every server
    (None, "request bodies being read"),  # the guard's share for one credential
])
def test_a_key_trickling_bodies_holds_its_own_places_and_no_one_elses(
    admin: RemoteMemoryClient, served: Served, redis_url: str, concurrent: int | None,
    refused: str
) -> None:
    """A review found 70 sockets of one key, each sending a body's first byte, holding every
    place bodies are read in: other keys' POSTs and the admin's flush got 503."""
    made = admin.create_key("slow", users=["alice"], concurrent=concurrent)
    admin.flush()
    port = urlsplit(served.url).port
    head = (f"POST /v1/messages HTTP/1.1\r\nHost: 127.0.0.1\r\nAuthorization: Bearer "
            f"{made.secret}\r\nContent-Type: application/json\r\nContent-Length: 100\r\n\r\n{{")
    slow = [socket.create_connection(("127.0.0.1", port or 0)) for _ in range(70)]
    for connection in slow:
        connection.sendall(head.encode())

    def its_next_post() -> str:
        answer = httpx.post(f"{served.url}/v1/messages", json={"session_id": "a",
                            "role": "user", "content": "x"},
                            headers={"Authorization": f"Bearer {made.secret}"})
        return answer.text if answer.status_code == 429 else ""

    eventually(lambda: refused in its_next_post(), "the slow key's places to be taken")
    if concurrent == 1:  # its trickled body is one of its running calls
        assert redis.Redis.from_url(redis_url).get(f"memq:running:{made.id}") == b"1"
    with key_for(admin, served, users=["alice"]) as other:
        assert other.append("b", "user", "still served", user_id="alice")
    admin.flush()
    for connection in slow:
        connection.close()


def test_the_shared_tokens_have_no_share_of_their_own(served: Served) -> None:
    """The deployment's own agents share one token: a share of 8 bodies would throttle all
    of them together. Past 8 slow bodies, the agent token's next POST is still read."""
    port = urlsplit(served.url).port
    token = served.token(Role.AGENT)
    head = (f"POST /v1/messages HTTP/1.1\r\nHost: 127.0.0.1\r\nAuthorization: Bearer "
            f"{token}\r\nContent-Type: application/json\r\nContent-Length: 100\r\n\r\n{{")
    slow = [socket.create_connection(("127.0.0.1", port or 0)) for _ in range(12)]
    for connection in slow:
        connection.sendall(head.encode())
    try:
        answer = httpx.post(f"{served.url}/v1/messages", json={
            "session_id": "a", "role": "user", "content": "x"},
            headers={"Authorization": f"Bearer {token}"})
        assert answer.is_success, answer.text
    finally:
        for connection in slow:
            connection.close()


def test_a_key_calling_steadily_over_http_asks_redis_once_in_many_calls(
    admin: RemoteMemoryClient, served: Served, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Before, a keyed POST asked Redis twice, to come in and to leave, on the event loop:
    a keyed get_context 16-25% slower at p50 than the shared token's, which asks none. The
    guard pays a POST's first unit and takes its running place before the body is read;
    its server keeps the place and units ahead for the key's next calls."""
    monkeypatch.setattr("memq.server.budgets.LINGER_S", 60.0)  # no place goes back here
    made = admin.create_key("one-at-a-time", users=["alice"], concurrent=1)
    admin.flush()
    asked: list[str] = []
    real = redis.Redis.execute_command

    def counted(self: redis.Redis, *args: object, **options: object) -> object:
        budget = {f"memq:budget:{made.id}", f"memq:running:{made.id}"}
        if budget & {str(a) for a in args}:
            asked.append(str(args[0]))
        return real(self, *args, **options)

    with RemoteMemoryClient(served.url, token=made.secret) as key:
        key.append("a", "user", "hello", user_id="alice")
        key.flush()  # the key read, the scripts loaded
        monkeypatch.setattr(redis.Redis, "execute_command", counted)
        began = time.monotonic()
        for _ in range(10):  # its one place is the call's: the same each time
            key.get_context("a", "what was said", scope="user")
        took = time.monotonic() - began
    # The units held ahead lapse after a second: asked again at most once a second.
    assert set(asked) <= {"EVALSHA"}
    assert len(asked) <= 1 + took / BURST_S


def counting(monkeypatch: pytest.MonkeyPatch, key: Grant) -> list[str]:
    """The commands sent to Redis about ``key``'s budget or running calls, from now on."""
    asked: list[str] = []
    real = redis.Redis.execute_command
    names = {f"memq:budget:{key.key_id}", f"memq:running:{key.key_id}"}

    def counted(self: redis.Redis, *args: object, **options: object) -> object:
        if names & {str(a) for a in args}:
            asked.append(str(args[0]))
        return real(self, *args, **options)

    monkeypatch.setattr(redis.Redis, "execute_command", counted)
    return asked


def test_a_servers_calls_of_a_key_spend_what_it_holds_ahead(
    redis_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    budgets = Budgets(redis.Redis.from_url(redis_url), redis_url, units_per_s=500,
                      concurrent=1)
    with budgets.entering(grant(key_id=secrets.token_hex(8))):
        pass  # the script loaded (a first EVALSHA may be refused and sent again)
    key = grant(key_id=secrets.token_hex(8))
    asked = counting(monkeypatch, key)
    for _ in range(26):  # a place and 1 + 25 units, asked for once
        with budgets.entering(key):
            pass
    assert asked == ["EVALSHA"]
    with budgets.entering(key):  # the 27th unit: none held any more
        pass
    assert asked == ["EVALSHA"] * 2
    now = time.monotonic()
    monkeypatch.setattr("memq.server.budgets.time.monotonic", lambda: now + BURST_S)
    with budgets.entering(key):  # what was held ahead lapsed, unspent
        pass
    assert asked == ["EVALSHA"] * 3


def test_a_place_idle_on_one_server_goes_back_to_redis_for_every_other(
    redis_url: str
) -> None:
    connection = redis.Redis.from_url(redis_url)
    budgets = Budgets(connection, redis_url, units_per_s=500, concurrent=1)
    other = Budgets(connection, redis_url, units_per_s=500, concurrent=1)
    key = grant(key_id=secrets.token_hex(8))
    with budgets.entering(key):
        pass
    with pytest.raises(RateLimited, match="calls running"), other.entering(key):
        pass  # the place lingers on the first server, for the key's next call there
    with budgets.entering(key):
        pass
    assert budgets.give_back_idle(older_than=0.0)  # it still holds units ahead
    assert connection.get(f"memq:running:{key.key_id}") == b"0"
    with other.entering(key):
        pass


def test_a_place_in_use_for_long_keeps_its_count_alive(
    redis_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The running count lapses after RUNNING_TTL_S unless renewed: a place a busy key's
    calls reuse for minutes is never taken from Redis again, so its server renews it."""
    connection = redis.Redis.from_url(redis_url)
    budgets = Budgets(connection, redis_url, units_per_s=500, concurrent=4)
    key = grant(key_id=secrets.token_hex(8))
    running = f"memq:running:{key.key_id}"
    with budgets.entering(key):
        connection.expire(running, 5)
        now = time.monotonic()
        monkeypatch.setattr("memq.server.budgets.time.monotonic",
                            lambda: now + RUNNING_TTL_S / 2)
        assert budgets.give_back_idle()
        assert connection.ttl(running) > RUNNING_TTL_S / 2
    assert connection.get(running) == b"1"


def test_a_write_of_n_events_costs_n_units_with_the_first_paid_at_the_door(
    admin: RemoteMemoryClient, served: Served
) -> None:
    made = admin.create_key("four-a-second", users=["alice"], units_per_s=4)
    admin.flush()
    turns = [{"session_id": "a", "role": "user", "content": f"t{i}", "user_id": "alice"}
             for i in range(4)]
    with RemoteMemoryClient(served.url, token=made.secret) as key:
        assert key.append_many(turns)  # 1 at the door + 3: its whole second, not 5
        with pytest.raises(RateLimited, match="budget"):
            key.append_many(turns)


def test_the_first_unit_paid_at_the_door_leaves_the_keys_smallest_call_as_it_was(
    redis_url: str
) -> None:
    """The guard pays a POST's first unit before its size is known; had that unit counted
    as the key's smallest call, the early refusal would wait for room for one unit, and a
    flood of 100-turn calls past its budget would have every body read and parsed before
    its refusal (another key's slowest turns took 1.7 times longer under such a flood)."""
    budgets = Budgets(redis.Redis.from_url(redis_url), redis_url, units_per_s=10,
                      concurrent=5)
    key = grant(key_id=secrets.token_hex(8))
    with budgets.entering(key), budgets.spend(key, 9, paid=1):
        pass
    assert budgets.spent(key)  # room for 1 more unit, none for another call of 9
    with budgets.entering(key):  # the door's unit fits, the call's size is still 9
        pass
    assert budgets.spent(key)


def test_places_kept_and_given_back_from_many_threads_add_up_in_redis(
    redis_url: str
) -> None:
    """Calls on many threads while the idle places go back as fast as they can: every
    place taken in Redis comes back, none twice, and no call fails on the way."""
    connection = redis.Redis.from_url(redis_url)
    budgets = Budgets(connection, redis_url, units_per_s=10**6, concurrent=1000)
    keys = [grant(key_id=secrets.token_hex(8)) for _ in range(3)]
    failed: list[BaseException] = []
    done = threading.Event()

    def calls(i: int) -> None:
        try:
            for n in range(300):
                key = keys[(i + n) % len(keys)]
                with budgets.holding(key) if n % 7 == 0 else budgets.entering(key):
                    pass
        except BaseException as exc:  # any failure fails the test
            failed.append(exc)

    def returning() -> None:
        while not done.is_set():
            budgets.give_back_idle(older_than=0.0)

    returner = threading.Thread(target=returning)
    returner.start()
    callers = [threading.Thread(target=calls, args=(i,)) for i in range(6)]
    for thread in callers:
        thread.start()
    for thread in callers:
        thread.join()
    done.set()
    returner.join()
    budgets.give_back_idle(older_than=0.0)
    assert failed == []
    assert [connection.get(f"memq:running:{k.key_id}") for k in keys] == [b"0"] * 3


@pytest.mark.parametrize(("queued", "events", "refused"), [
    (0, MAX_WAITING * 4, False),  # an empty queue takes any call the budget lets in
    (MAX_WAITING - 10, 10, False),
    (MAX_WAITING - 10, 11, True),
    (MAX_WAITING + 5, 1, True),
])
def test_a_write_is_refused_while_its_keys_queue_is_full(
    redis_url: str, queued: int, events: int, refused: bool
) -> None:
    """A key sending faster than the writer commits filled the keys' queue without end,
    and another key's turn, beyond the items the relay takes in turn from, was not
    committed in 30 s (bench/fairness.py, a key without a budget)."""
    connection = redis.Redis.from_url(redis_url)
    budgets = Budgets(connection, redis_url, units_per_s=10**6, concurrent=16)
    key = grant(key_id=secrets.token_hex(8))
    connection.set(names.key_counter(key.key_id, "pushed"), 1000 + queued)
    connection.set(names.key_counter(key.key_id, "relayed"), 1000)
    if refused:
        with pytest.raises(RateLimited, match=rf"{queued} events queued for the writer"), \
                budgets.spend(key, events, writes=True):
            pass
        assert connection.get(f"memq:budget:{key.key_id}") is None  # nothing spent
    else:
        with budgets.spend(key, events, writes=True):
            pass
    with budgets.spend(key, 1):  # a read is never held back by the queue
        pass


def test_the_bound_on_a_keys_queue_is_the_configured_one(config: Config) -> None:
    limits = dataclasses.replace(config.limits, key_queued=3)
    with MemoryClient(config=config.replace(limits=limits)) as person:
        budgets = Budgets.configured(person)
        key = grant(key_id=secrets.token_hex(8))
        person.redis.set(names.key_counter(key.key_id, "pushed"), 2)
        with budgets.spend(key, 1, writes=True):
            pass
        with pytest.raises(RateLimited, match="may have 3"), budgets.spend(key, 2, writes=True):
            pass


def test_after_a_write_refused_for_its_queue_the_keys_next_writes_are_refused_unread(
    admin: RemoteMemoryClient, served: Served, redis_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A bulk writer sending a refused call again at once had each 100-turn body read and
    parsed before its refusal: with 10 ms between tries, the server took the writer's CPU
    and a bulk key committed 797 turns a second beside a light key, against 1,280."""
    monkeypatch.setattr("memq.server.budgets.QUEUE_PAUSE_S", 60.0)  # however slow the test
    made = admin.create_key("bulk", users=["alice"], units_per_s=10**6)
    admin.flush()
    connection = redis.Redis.from_url(redis_url)
    connection.incrby(names.key_counter(made.id, "pushed"), 10_000)  # far behind
    headers = {"Authorization": f"Bearer {made.secret}"}
    turn = {"session_id": "a", "role": "user", "content": "x", "user_id": "alice"}
    first = httpx.post(f"{served.url}/v1/messages", json=turn, headers=headers)
    assert first.status_code == 429
    assert "queued for the writer" in first.text, first.text
    port = urlsplit(served.url).port
    unread = socket.create_connection(("127.0.0.1", port or 0))
    unread.sendall((f"POST /v1/messages/batch HTTP/1.1\r\nHost: 127.0.0.1\r\nAuthorization: "
                    f"Bearer {made.secret}\r\nContent-Type: application/json\r\n"
                    f"Content-Length: 5000000\r\n\r\n{{").encode())
    reply = b""
    while chunk := unread.recv(4096):  # answered, and closed, with the body still unsent
        reply += chunk
    unread.close()
    assert reply.split(b" ", 2)[1] == b"429"
    assert b"fill its queue" in reply, reply
    read = httpx.post(f"{served.url}/v1/context", headers=headers,
                      json={"session_id": "a", "query": "x"})
    assert read.status_code != 429, read.text  # its reads are never held back


_ENDING = """
import sys, redis
from memq.server.budgets import Budgets
from memq.server.principals import Grant
url = sys.argv[1]
budgets = Budgets(redis.Redis.from_url(url), url, units_per_s=500, concurrent=4)
key = Grant(sys.argv[2], frozenset({"alice"}), None, frozenset({"read"}))
with budgets.entering(key):
    pass  # its place kept for the key's next call here
running = budgets.entering(key)
running.__enter__()  # a call still running when the process ends
print(redis.Redis.from_url(url).get("memq:running:" + sys.argv[2]).decode())
"""


def test_a_process_ending_gives_back_every_place_its_servers_kept(redis_url: str) -> None:
    """A kept place would otherwise stay counted for RUNNING_TTL_S after memq serve
    stopped: a key of one call at once refused on every server for five minutes."""
    key_id = secrets.token_hex(8)
    done = subprocess.run([sys.executable, "-c", _ENDING, redis_url, key_id], cwd=ROOT,
                          capture_output=True, text=True, timeout=60, check=False)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "1"  # held while the process ran
    assert redis.Redis.from_url(redis_url).get(f"memq:running:{key_id}") == b"0"
