"""Stream ids a sender chooses: no agent or worker can name one in a stream the writer
reads, and the writer survives any id already there (set aside, the stream brought back),
so one hostile id never stops the other senders.

Before the relay, the agent's Redis user could ``XADD memq:inbox <id>``: an id past 2^63
killed the writer at every start (its position could not be recorded), and
``18446744073709551615-18446744073709551615`` left every later append of every agent
refused, even once the entry was deleted.
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Iterator

import apsw
import pytest
import redis
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from memq import MemoryClient, names
from memq.authority import Role
from memq.clock import now_rfc3339, uuid7
from memq.config import Config
from memq.events import Event, EventType, encode
from memq.inbox import plausible, stream_position
from memq.testing import WriterThread, wait_committed
from tests.faults import figures

pytestmark = [pytest.mark.faults, pytest.mark.redis]

TOP = 2**64 - 1
HOSTILE_IDS = [f"{TOP}-{TOP}", f"{2**63}-0", f"0-{2**63}", f"{2**63 - 1}-{2**63 - 1}",
               "4102444800000-0"]  # the year 2100: in range, but from the future


def raw_append(session: str = "s", content: str = "hi") -> bytes:
    return encode(Event(id=uuid7(), type=EventType.MESSAGE_APPENDED, session_id=session,
                        created_at=now_rfc3339(),
                        payload={"message_id": uuid7(), "role": "user", "content": content,
                                 "importance": 0.5}))


def rejected(config: Config) -> list[tuple[str, str]]:
    conn = apsw.Connection(config.db_path, flags=apsw.SQLITE_OPEN_READONLY)
    try:
        return conn.execute("SELECT stream_id, reason FROM rejected_events").fetchall()
    finally:
        conn.close()


@pytest.fixture
def agent(config: Config, role_urls: dict[Role, str], writer: WriterThread
          ) -> Iterator[MemoryClient]:
    with MemoryClient(redis_url=role_urls[Role.AGENT], db_path=config.db_path) as client:
        yield client


@pytest.mark.parametrize("role", [Role.AGENT, Role.WORKER])
@pytest.mark.parametrize("stream", names.INBOX_STREAMS)
@pytest.mark.parametrize("entry_id", [*HOSTILE_IDS, "*"])
def test_no_agent_or_worker_may_add_to_a_stream_the_writer_reads(
    role: Role, stream: str, entry_id: str, role_urls: dict[Role, str]
) -> None:
    connection = redis.Redis.from_url(role_urls[role])
    with pytest.raises(redis.exceptions.NoPermissionError):
        connection.xadd(stream, {names.EVENT_FIELD: raw_append()}, id=entry_id)


@pytest.mark.parametrize("entry_id", HOSTILE_IDS)
def test_the_writer_survives_an_id_already_in_its_stream(
    entry_id: str, config: Config, role_urls: dict[Role, str]
) -> None:
    """Left by a sender before the relay (or the admin): the entry, and what Redis stamped
    after it, are set aside with the reason; the stream takes ids again; agents go on."""
    admin = redis.Redis.from_url(config.redis_url)
    admin.xadd(names.INBOX_STREAM, {names.EVENT_FIELD: raw_append()}, id=entry_id)
    with WriterThread(config) as running:
        with MemoryClient(redis_url=role_urls[Role.AGENT], db_path=config.db_path) as agent:
            agent.append("s", "user", "after the hostile id")
            agent.flush(10)
            assert [m.content for m in agent.history("s")] == ["after the hostile id"]
        admin.xadd(names.INBOX_STREAM, {names.EVENT_FIELD: raw_append(content="admin")})
        wait_committed(admin)
        assert running.thread is not None
        assert running.thread.is_alive()
    [(stream_id, reason)] = rejected(config)
    assert stream_id == entry_id
    assert "chosen by its sender" in reason
    figures.add("stream_ids")
    last = admin.xinfo_stream(names.INBOX_STREAM)["last-generated-id"]
    assert plausible(stream_position(last))


def test_a_writer_restarted_on_a_poisoned_stream_starts(config: Config) -> None:
    """The entry is pending when the writer dies: the next one sets it aside at start."""
    admin = redis.Redis.from_url(config.redis_url)
    admin.xadd(names.INBOX_STREAM, {names.EVENT_FIELD: raw_append()}, id=f"{TOP}-{TOP}")
    for _ in range(2):
        with WriterThread(config) as running:
            deadline = time.monotonic() + 10
            while not rejected(config) and time.monotonic() < deadline:
                time.sleep(0.01)
            assert running.thread is not None
            assert running.thread.is_alive()
    assert len(rejected(config)) == 1


# -- generated: ids anywhere in the id space, items of any bytes ----------------------------

IDS = st.tuples(st.one_of(st.integers(0, TOP), st.sampled_from([0, 2**63 - 1, 2**63, TOP])),
                st.one_of(st.integers(0, TOP), st.sampled_from([0, 1, 2**63, TOP])))


@settings(max_examples=25, deadline=None, database=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(ids=st.lists(IDS, min_size=1, max_size=4),
       items=st.lists(st.binary(max_size=300), max_size=4),
       stream=st.sampled_from(names.INBOX_STREAMS))
@example(ids=[(TOP, TOP)], items=[], stream=names.INBOX_STREAM)
@example(ids=[(TOP, TOP - 1)], items=[b"\n{}"], stream=names.WORKER_INBOX_STREAM)
def test_no_id_and_no_item_stops_the_others(
    ids: list[tuple[int, int]], items: list[bytes], stream: str,
    agent: MemoryClient, config: Config, role_urls: dict[Role, str], writer: WriterThread,
) -> None:
    """The admin's explicit ids on any stream, the agent's raw queue items: the writer
    stays up, and an agent's append after them is committed."""
    admin = redis.Redis.from_url(config.redis_url)
    for ms, seq in sorted(ids):
        # Not above the stream's top: Redis refuses it, and nothing is added.
        with contextlib.suppress(redis.exceptions.ResponseError):
            admin.xadd(stream, {names.EVENT_FIELD: raw_append()}, id=f"{ms}-{seq}")
    queue = redis.Redis.from_url(role_urls[Role.AGENT])
    if items:
        queue.rpush(names.INBOX_QUEUES[names.INBOX_STREAM], *items)
    agent.append("fuzz", "user", "still heard")
    agent.flush(20)
    wait_committed(admin, timeout=20)
    assert writer.thread is not None
    assert writer.thread.is_alive()
    assert "still heard" in [m.content for m in agent.history("fuzz", limit=500)]
    deadline = time.monotonic() + 10
    while not all_plausible(admin) and time.monotonic() < deadline:
        time.sleep(0.01)  # a hostile id on another stream: set aside in its own time
    assert all_plausible(admin)
    figures.add("stream_ids", len(ids) + len(items))


def all_plausible(admin: redis.Redis) -> bool:
    """Whether every stream's last id is one Redis could have made: none is poisoned."""
    for name in names.INBOX_STREAMS:
        try:
            last = admin.xinfo_stream(name)["last-generated-id"]
        except redis.exceptions.ResponseError:
            continue
        if not plausible(stream_position(last)):
            return False
    return True
