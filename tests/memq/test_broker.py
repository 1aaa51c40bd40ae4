"""The Redis boundary: which errors are retried, and how a give-up reads."""

from __future__ import annotations

import pytest
import redis

from memq import broker
from memq.errors import BrokerError
from tests.conftest import free_port


def test_an_unreachable_redis_is_retried_until_the_deadline() -> None:
    url = f"redis://127.0.0.1:{free_port()}/0"  # nothing listens there
    client = broker.connect(url, retries=0)
    retries: list[int] = []
    with pytest.raises(BrokerError, match=r"pinging failed: Redis at redis://127\.0\.0\.1:"
                       r"\d+/0 did not answer for 0\.3 s"):
        broker.retrying(url, "pinging", client.ping, retry_for_s=0.3,
                        on_retry=lambda: retries.append(1))
    assert len(retries) >= 2  # 50 ms, 100 ms, ... within 0.3 s


def test_a_refused_command_is_not_retried() -> None:
    calls: list[int] = []

    def refused() -> None:
        calls.append(1)
        raise redis.exceptions.ResponseError("WRONGTYPE Operation against a key")

    with pytest.raises(BrokerError, match="reading failed at redis://h:6379/0: WRONGTYPE"):
        broker.retrying("redis://h:6379/0", "reading", refused, retry_for_s=5.0)
    assert calls == [1]


def test_refused_credentials_are_not_retried() -> None:
    calls: list[int] = []

    def refused() -> None:
        calls.append(1)
        raise redis.exceptions.AuthenticationError("invalid username-password pair")

    with pytest.raises(BrokerError, match="invalid username-password pair"):
        broker.retrying("redis://:secret@h:6379/0", "reading", refused, retry_for_s=5.0)
    assert calls == [1]


def test_a_call_that_recovers_returns_its_value() -> None:
    attempts = iter([redis.exceptions.ConnectionError("reset by peer"), None])

    def flaky() -> str:
        error = next(attempts)
        if error is not None:
            raise error
        return "ok"

    assert broker.retrying("redis://h:6379/0", "sending", flaky, retry_for_s=5.0) == "ok"
