"""The relay: queued items into the writer's streams, in order, each once, with ids Redis
makes; the positions a sender computes are the ordinals the relay gives."""

from __future__ import annotations

import threading

import pytest
import redis
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from memq import names
from memq.inbox import caught_up, committed_marks, inbox_marks, queue_item, send_to_inbox
from memq.store.write.relay import relay, relay_all

pytestmark = pytest.mark.redis

AGENT = names.INBOX_STREAM
QUEUE = names.INBOX_QUEUES[AGENT]


def entries(connection: redis.Redis, stream: str = AGENT) -> list[dict[bytes, bytes]]:
    return [fields for _, fields in connection.xrange(stream)]


def test_items_become_entries_in_order_with_sender_and_ordinal(redis_url: str) -> None:
    connection = redis.Redis.from_url(redis_url)
    positions = send_to_inbox(connection, [b'{"a":1}', b'{"a":2}'], AGENT, "f" * 32)
    positions += send_to_inbox(connection, [b'{"a":3}'], AGENT)
    assert positions == [(1, 0), (2, 0), (3, 0)]
    assert relay_all(connection) == 3
    assert entries(connection) == [
        {b"event": b'{"a":1}', b"sender": b"f" * 32, b"ordinal": b"1"},
        {b"event": b'{"a":2}', b"sender": b"f" * 32, b"ordinal": b"2"},
        {b"event": b'{"a":3}', b"ordinal": b"3"},
    ]
    assert connection.llen(QUEUE) == 0
    assert connection.get(names.RELAYED_KEYS[AGENT]) == b"3"


@pytest.mark.parametrize("stream", [AGENT, names.KEYS_INBOX_STREAM])
def test_an_item_without_a_newline_is_an_event_the_writer_will_set_aside(
    redis_url: str, stream: str,
) -> None:
    connection = redis.Redis.from_url(redis_url)
    connection.rpush(names.INBOX_QUEUES[stream], b"no newline at all", b"a\nb\nc")
    relay_all(connection)
    assert entries(connection, stream) == [
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
            positions = send_to_inbox(connection, raws, AGENT)
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
    send_to_inbox(connection, [b"1", b"2"], AGENT)
    relay_all(connection)
    top = "18446744073709551615-18446744073709551615"
    connection.xadd(AGENT, {"event": b"x"}, id=top)  # an admin's choice: the stream is full
    send_to_inbox(connection, [b"3"], AGENT)
    with pytest.raises(redis.exceptions.ResponseError, match="stopped after 0 items"):
        relay(connection, AGENT)
    assert connection.lrange(QUEUE, 0, -1) == [b"\n3"]
    assert connection.get(names.RELAYED_KEYS[AGENT]) == b"2"
    connection.delete(AGENT)
    assert relay_all(connection) == 1
    assert entries(connection) == [{b"event": b"3", b"ordinal": b"3"}]


def test_marks_count_what_waits_in_a_queue(redis_url: str) -> None:
    connection = redis.Redis.from_url(redis_url)
    send_to_inbox(connection, [b"1", b"2"], AGENT)
    marks = inbox_marks(connection)
    assert marks == {QUEUE: (2, 0)}
    assert not caught_up(committed_marks(connection), marks)


# -- the keys' queue: relayed key by key, a few in flight -----------------------------------

KEYS = names.KEYS_INBOX_STREAM


def keyed(connection: redis.Redis, sender: str, count: int, tag: str) -> list[tuple[int, int]]:
    raws = [f'{{"{tag}":{i}}}'.encode() for i in range(count)]
    return send_to_inbox(connection, raws, KEYS, sender)


def test_the_keys_queue_takes_each_key_in_turn_and_keeps_each_senders_order(
        redis_url: str) -> None:
    """A key's flood queued first does not keep another key's turn behind it: a light
    key's turn moves at once with one of the flood's, then, once the writer has those,
    the flood fills the stream's share; each entry carries its key's own count."""
    from memq.store.write import relay as relays

    connection = redis.Redis.from_url(redis_url)
    connection.xgroup_create(KEYS, names.WRITER_GROUP, id="0", mkstream=True)
    flood = keyed(connection, "a" * 32 + ":key-a", 100, "a")
    turn = keyed(connection, "b" * 32 + ":key-b", 1, "b")
    more = keyed(connection, "c" * 32 + ":key-a", 2, "c")  # key a, another sender
    base = names.KEY_POSITION_BASE
    assert (flood[0], flood[-1], turn, more) == ((base + 1, 0), (base + 100, 0),
                                                 [(base + 1, 0)], [(base + 101, 0),
                                                                   (base + 102, 0)])
    assert relays._relay(connection, KEYS) == (2, True)  # then wait for the writer
    assert [f[b"event"] for f in entries(connection, KEYS)] == [b'{"a":0}', b'{"b":0}']
    assert relays._relay(connection, KEYS) == (relays.IN_FLIGHT - 2, False)  # key a alone
    moved = entries(connection, KEYS)
    assert [f[b"event"] for f in moved[2:4]] == [b'{"a":1}', b'{"a":2}']
    assert [int(f[b"ordinal"]) for f in moved] == list(range(1, relays.IN_FLIGHT + 1))
    # Key a's entries, of two senders, count on in its own order.
    a_seqs = [int(f[b"kseq"]) for f in moved if f[b"sender"].endswith(b"key-a")]
    assert a_seqs == list(range(1, len(a_seqs) + 1))
    # Nothing more while the writer has not taken those: the stream holds its share.
    assert relays._relay(connection, KEYS) == (0, True)
    assert connection.llen(names.INBOX_QUEUES[KEYS]) == 103 - relays.IN_FLIGHT


def test_light_keys_never_starve_a_busy_one(redis_url: str) -> None:
    """However many light keys queue before and after a flood, each move takes the flood's
    next item once the flood is among the first keys of the queue, and only one, until the
    light keys have all moved."""
    from memq.store.write import relay as relays

    connection = redis.Redis.from_url(redis_url)
    connection.xgroup_create(KEYS, names.WRITER_GROUP, id="0", mkstream=True)
    for i in range(40):
        keyed(connection, f"{i:032d}:light-{i}", 1, f"l{i}")
    keyed(connection, "a" * 32 + ":key-a", 100, "a")
    for i in range(40, 80):
        keyed(connection, f"{i:032d}:light-{i}", 1, f"l{i}")
    flood_moved = []
    for _ in range(4):
        connection.xtrim(KEYS, maxlen=0)  # as if the writer had committed what moved
        relays._relay(connection, KEYS)
        flood_moved.append(sum(1 for f in entries(connection, KEYS)
                               if f[b"sender"].endswith(b"key-a")))
    # The first 32 light keys fill a move; then the flood moves one by one beside the
    # rest; with no light key left, it fills the stream's share.
    assert flood_moved == [0, 1, 1, relays.IN_FLIGHT]


@settings(max_examples=60, deadline=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(waiting=st.lists(st.integers(0, 7), min_size=1, max_size=60))
def test_a_move_takes_light_keys_whole_and_one_of_each_busy_key_beside_them(
        redis_url: str, waiting: list[int]) -> None:
    """Items of up to 8 keys in any interleaving: each key's moved items are the first it
    queued, in order; beside a light key, each busy key moves one item and every light
    key all of its own; with none light or none busy, the move fills the stream's share."""
    from memq.store.write import relay as relays

    connection = redis.Redis.from_url(redis_url)
    connection.delete(KEYS, names.INBOX_QUEUES[KEYS], names.RELAYED_KEYS[KEYS])
    connection.xgroup_create(KEYS, names.WRITER_GROUP, id="0", mkstream=True)
    for n, key in enumerate(waiting):
        keyed(connection, f"{key:032d}:key-{key}", 1, f"{key}-{n}")
    counts = {key: waiting.count(key) for key in set(waiting)}
    moved, wait = relays._relay(connection, KEYS)
    taken: dict[int, list[bytes]] = {}
    for fields in entries(connection, KEYS):
        taken.setdefault(int(fields[b"sender"][:32]), []).append(fields[b"event"])
    for key, events in taken.items():  # each key's first items, in its order
        assert events == [f"{{\"{key}-{n}\":0}}".encode()
                          for n, k in enumerate(waiting) if k == key][:len(events)]
    light = {key for key, count in counts.items() if count <= relays.LIGHT}
    if light and len(light) < len(counts) and len(counts) <= relays.IN_FLIGHT:
        assert wait
        assert all(len(taken.get(key, [])) == 1 for key in counts if key not in light)
        assert sum(len(v) for k, v in taken.items() if k in light) == min(
            sum(counts[k] for k in light), relays.IN_FLIGHT - (len(counts) - len(light)))
    else:
        assert not wait
        assert moved == min(len(waiting), relays.IN_FLIGHT)


def test_a_keyed_sender_is_committed_by_its_keys_count(redis_url: str) -> None:
    """The writer moves each key's committed count: a flush waits on its key's items."""
    from memq.config import Config
    from memq.store.write.inbox import Inbox

    connection = redis.Redis.from_url(redis_url)
    inbox = Inbox(connection, Config(redis_url=redis_url))
    inbox.ensure_group()
    keyed(connection, "a" * 32 + ":key-a", 40, "a")
    keyed(connection, "b" * 32 + ":key-b", 1, "b")
    relay(connection, KEYS)
    taken = inbox.read_new()
    inbox.acknowledge(taken)
    counts = {who: connection.get(names.key_count(who * 32 + f":key-{who}", "committed"))
              for who in "ab"}
    base = names.KEY_POSITION_BASE
    a_taken = sum(1 for e in taken if e.fields[b"sender"][:1] == b"a")
    assert counts == {"a": f"{base + a_taken}-0".encode(), "b": f"{base + 1}-0".encode()}


def test_an_item_an_older_server_queued_leaves_the_keys_counts_exact(redis_url: str) -> None:
    """Queued uncounted (before keys were counted), it gets no count of its key's: the
    first item pushed since is still the key's first, and its flush waits for it."""
    from memq.config import Config
    from memq.store.write.inbox import Inbox

    connection = redis.Redis.from_url(redis_url)
    inbox = Inbox(connection, Config(redis_url=redis_url))
    inbox.ensure_group()
    sender = "a" * 32 + ":key-a"
    connection.rpush(names.INBOX_QUEUES[KEYS], queue_item(b'{"old":1}', sender))
    [position] = keyed(connection, sender, 1, "new")
    relay(connection, KEYS)
    taken = inbox.read_new()
    assert [e.fields.get(b"kseq") for e in taken] == [None, b"1"]
    assert [e.fields[b"sender"] for e in taken] == [sender.encode()] * 2
    inbox.acknowledge(taken[:1])  # the old item alone
    assert connection.get(names.key_count(sender, "committed")) is None
    inbox.acknowledge(taken[1:])
    assert connection.get(names.key_count(sender, "committed")) == (
        f"{position[0]}-{position[1]}".encode())


def test_a_long_delegated_tokens_sender_is_counted_by_its_key(redis_url: str) -> None:
    """A delegated token's narrowing may be long (many users): its key is what counts."""
    from memq.config import Config
    from memq.store.write.inbox import Inbox

    connection = redis.Redis.from_url(redis_url)
    inbox = Inbox(connection, Config(redis_url=redis_url))
    inbox.ensure_group()
    sender = "a" * 32 + ":key-a:" + "n" * 5000
    [position] = keyed(connection, sender, 1, "t")
    relay(connection, KEYS)
    inbox.acknowledge(inbox.read_new())
    assert connection.get(names.key_count("x:key-a", "committed")) == (
        f"{position[0]}-{position[1]}".encode())
