"""The relay: queued items into the writer's streams, in order, each once, with ids Redis
makes; the positions a sender computes are the ordinals the relay gives."""

from __future__ import annotations

import threading

import pytest
import redis

from memq import broker, names
from memq.store.write.relay import relay, relay_all

pytestmark = pytest.mark.redis

AGENT = names.INBOX_STREAM
QUEUE = names.INBOX_QUEUES[AGENT]


def entries(connection: redis.Redis, stream: str = AGENT) -> list[dict[bytes, bytes]]:
    return [fields for _, fields in connection.xrange(stream)]


def test_items_become_entries_in_order_with_sender_and_ordinal(redis_url: str) -> None:
    connection = redis.Redis.from_url(redis_url)
    positions = broker.send_to_inbox(connection, [b'{"a":1}', b'{"a":2}'], AGENT, "f" * 32)
    positions += broker.send_to_inbox(connection, [b'{"a":3}'], AGENT)
    assert positions == [(1, 0), (2, 0), (3, 0)]
    assert relay_all(connection) == 3
    assert entries(connection) == [
        {b"event": b'{"a":1}', b"sender": b"f" * 32, b"ordinal": b"1"},
        {b"event": b'{"a":2}', b"sender": b"f" * 32, b"ordinal": b"2"},
        {b"event": b'{"a":3}', b"ordinal": b"3"},
    ]
    assert connection.llen(QUEUE) == 0
    assert connection.get(names.RELAYED_KEYS[AGENT]) == b"3"


def test_an_item_without_a_newline_is_an_event_the_writer_will_set_aside(
    redis_url: str,
) -> None:
    connection = redis.Redis.from_url(redis_url)
    connection.rpush(QUEUE, b"no newline at all", b"a\nb\nc")
    relay_all(connection)
    assert entries(connection) == [
        {b"event": b"no newline at all", b"ordinal": b"1"},
        {b"event": b"b\nc", b"sender": b"a", b"ordinal": b"2"},
    ]


def test_positions_stay_exact_while_the_relay_runs(redis_url: str) -> None:
    """Senders pushing from several threads while the relay moves items: each position a
    sender computed is the ordinal its item got, and no item is lost or doubled."""
    connection = redis.Redis.from_url(redis_url)
    sent: dict[bytes, tuple[int, int]] = {}
    lock = threading.Lock()

    def sender(n: int) -> None:
        for i in range(50):
            raws = [f'{{"n":{n},"i":{i},"k":{k}}}'.encode() for k in range(3)]
            positions = broker.send_to_inbox(connection, raws, AGENT)
            with lock:
                sent.update(zip(raws, positions, strict=True))

    threads = [threading.Thread(target=sender, args=(n,)) for n in range(4)]
    for thread in threads:
        thread.start()
    while any(t.is_alive() for t in threads):
        relay(connection, AGENT, run=7)
    relay_all(connection)
    got = {f[b"event"]: (int(f[b"ordinal"]), 0) for f in entries(connection)}
    assert got == sent
    assert sorted(got.values()) == [(i, 0) for i in range(1, 601)]


def test_a_refused_xadd_leaves_its_items_queued(redis_url: str) -> None:
    """Moving is atomic per item: what Redis refused stays in the list, nothing doubles."""
    connection = redis.Redis.from_url(redis_url)
    broker.send_to_inbox(connection, [b"1", b"2"], AGENT)
    relay_all(connection)
    top = "18446744073709551615-18446744073709551615"
    connection.xadd(AGENT, {"event": b"x"}, id=top)  # an admin's choice: the stream is full
    broker.send_to_inbox(connection, [b"3"], AGENT)
    with pytest.raises(redis.exceptions.ResponseError, match="stopped after 0 items"):
        relay(connection, AGENT)
    assert connection.lrange(QUEUE, 0, -1) == [b"\n3"]
    assert connection.get(names.RELAYED_KEYS[AGENT]) == b"2"
    connection.delete(AGENT)
    assert relay_all(connection) == 1
    assert entries(connection) == [{b"event": b"3", b"ordinal": b"3"}]


def test_marks_count_what_waits_in_a_queue(redis_url: str) -> None:
    connection = redis.Redis.from_url(redis_url)
    broker.send_to_inbox(connection, [b"1", b"2"], AGENT)
    marks = broker.inbox_marks(connection)
    assert marks == {QUEUE: (2, 0)}
    assert not broker.caught_up(broker.committed_marks(connection), marks)
