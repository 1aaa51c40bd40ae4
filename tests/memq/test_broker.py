"""The Redis boundary: which errors are retried, and how a give-up reads."""

from __future__ import annotations

import signal
from pathlib import Path

import pytest
import redis
from redis.connection import SSLConnection
from redis.sentinel import SentinelConnectionPool, SentinelManagedConnection

from memq import broker
from memq.config import Config
from memq.errors import BrokerError, ConfigError
from memq.redis_config import RedisConfig
from memq.testing import RedisServer, free_port


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


def test_with_sentinels_the_url_gives_credentials_and_db_the_sentinels_the_address() -> None:
    sentinels = RedisConfig(sentinels=("127.0.0.1:26379", "10.0.0.2:26380"), service="memq")
    client = broker.connect("rediss://agent:s3cret@ignored:1/3", sentinel=sentinels,
                            client_name="w1")
    pool = client.connection_pool
    assert isinstance(pool, SentinelConnectionPool)
    assert pool.service_name == "memq"
    kwargs = pool.connection_kwargs
    assert (kwargs["username"], kwargs["password"], kwargs["db"]) == ("agent", "s3cret", 3)
    assert (kwargs["client_name"], "host" in kwargs) == ("w1", False)
    assert issubclass(pool.connection_class, SentinelManagedConnection)
    assert issubclass(pool.connection_class, SSLConnection)
    addresses = [s.connection_pool.connection_kwargs["port"]
                 for s in pool.sentinel_manager.sentinels]
    assert addresses == [26379, 26380]


def test_a_unix_socket_cannot_go_with_sentinels() -> None:
    with pytest.raises(ConfigError, match="cannot go with \\[redis\\] sentinels"):
        broker.connect("unix:///tmp/r.sock?db=0", sentinel=RedisConfig(sentinels=("h:1",)))


def test_no_sentinel_answering_is_a_transient_broker_error() -> None:
    sentinels = RedisConfig(sentinels=(f"127.0.0.1:{free_port()}",))
    url = "redis://127.0.0.1:1/0"
    client = broker.connect(url, sentinel=sentinels, retries=0, timeout_s=0.5)
    with pytest.raises(BrokerError, match=r"did not answer for 0\.2 s") as caught:
        broker.retrying(url, "pinging", client.ping, retry_for_s=0.2)
    assert broker.is_transient(caught.value.__cause__)


class Interrupted(Exception):
    pass


@pytest.mark.redis
def test_a_read_cut_short_does_not_leave_its_reply_to_the_next_command(tmp_path: Path) -> None:
    """As RQ's warm shutdown does: an exception raised by a signal handler inside a blocking
    read. The connection must not go back to the pool with that read's reply to come."""
    (tmp_path / "m").mkdir()
    (tmp_path / "s").mkdir()
    with RedisServer(tmp_path / "m") as master, \
            RedisServer.sentinel_of(tmp_path / "s", master.port) as sentinel:
        config = Config(redis_url="redis://mymaster/0",
                        redis=RedisConfig(sentinels=(f"127.0.0.1:{sentinel.port}",)))
        client = broker.client_for(config)

        def interrupt(*_: object) -> None:
            raise Interrupted

        previous = signal.signal(signal.SIGALRM, interrupt)
        try:
            signal.setitimer(signal.ITIMER_REAL, 0.2)
            with pytest.raises(Interrupted):
                client.blpop(["nothing"], timeout=2)
        finally:
            signal.signal(signal.SIGALRM, previous)
        client.set("key", "value")
        assert client.get("key") == b"value"


def test_too_few_replicas_is_tried_again_within_the_deadline() -> None:
    replies = iter([broker.NotReplicated("only 0 of 1"), broker.NotReplicated("only 0 of 1"),
                    None])

    def send() -> str:
        failure = next(replies)
        if failure is not None:
            raise failure
        return "sent"

    assert broker.retrying("redis://h:6379/0", "sending", send, retry_for_s=5.0) == "sent"
    always = broker.NotReplicated("only 0 of 1 replicas confirmed them")

    def refused() -> None:
        raise always

    with pytest.raises(broker.NotReplicated) as caught:
        broker.retrying("redis://h:6379/0", "sending", refused, retry_for_s=0.2)
    assert caught.value is always


@pytest.mark.parametrize("url", ["redis://127.0.0.1:6379/x", "rediss://h:1/%31x",
                                 "redis://h:1/0/1", "redis://h:1/\u00b2"])
def test_a_database_that_is_not_a_number_is_refused_not_read_as_zero(url: str) -> None:
    """redis-py skips a database it cannot read as an int: memq then used database 0,
    perhaps another deployment's."""
    config = Config(redis_url=url)
    with pytest.raises(ConfigError, match="the database after the host must be a number"):
        broker.client_for(config)
    with pytest.raises(ConfigError, match="the database after the host must be a number"):
        broker.connect_async(config)


@pytest.mark.parametrize("url", ["redis://h:1", "redis://h:1/", "redis://h:1/15",
                                 "unix:///run/redis.sock?db=2"])
def test_a_database_by_number_or_none_is_accepted(url: str) -> None:
    assert broker.client_for(Config(redis_url=url)) is not None
