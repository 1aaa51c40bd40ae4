"""A key's budget and its calls at once, counted in Redis for every server together."""

from __future__ import annotations

import httpx
import pytest
import redis

from memq import RemoteMemoryClient
from memq.errors import RateLimited
from memq.server.budgets import Budgets, cost
from memq.server.principals import Grant
from tests.producers.serving import Served
from tests.server.conftest import key_for

pytestmark = [pytest.mark.redis]


def grant(**budget: int) -> Grant:
    return Grant("0123456789abcdef", frozenset({"alice"}), None, frozenset({"read"}), **budget)


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


def test_a_call_beyond_the_seconds_budget_is_refused(redis_url: str) -> None:
    budgets = Budgets(redis.Redis.from_url(redis_url), redis_url, units_per_s=10,
                      concurrent=16)
    with pytest.raises(RateLimited, match="10 units"), budgets.spend(grant(), 11):
        pass
    with pytest.raises(RateLimited, match="5 units"), budgets.spend(grant(units_per_s=5), 6):
        pass


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


def test_a_spent_second_is_seen_by_every_server_that_spends_in_it(redis_url: str,
                                                monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr("memq.server.budgets.time.time", lambda: 1_800_000_000.5)
    budgets = Budgets(redis.Redis.from_url(redis_url), redis_url, units_per_s=10,
                      concurrent=16)
    other = Budgets(redis.Redis.from_url(redis_url), redis_url, units_per_s=10,
                    concurrent=16)
    assert not other.spent(grant())
    with budgets.spend(grant(), 9):
        pass
    with other.spend(grant(), 1):  # its own call reads the total of every server
        pass
    assert other.spent(grant())  # what the guard asks before reading a body
    assert budgets.spent(grant()) is False  # it last saw 9 spent; its next call will see
    assert not other.spent(grant(units_per_s=11))
    assert not other.spent(None)
