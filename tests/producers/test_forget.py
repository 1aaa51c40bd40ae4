"""Forgetting end to end: a unique marker is planted everywhere memq keeps a conversation,
then forgotten; the raw bytes of the database, its WAL and every Redis key hold it no more.

Real parts only: a redis-server, the writer (in a thread), the embed and consolidate jobs
run by RQ burst workers in this process, the real model. The marker is in turns, a long
tool output, a tool call's arguments, a summary (the extractive summariser keeps
sentences whole), the vectors, RQ jobs finished and still queued, another process's
caches and, for a user, a fact.
"""

from __future__ import annotations

import threading
import zlib
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import apsw
import pytest
import redis

from memq import MemoryClient, names
from memq.cli import main
from memq.config import Config, ConsolidationConfig, RetrievalConfig
from memq.errors import EventsRejected, NotFound, PermissionDenied, ValidationError
from memq.store.projections import erasure_steps
from memq.testing import WriterThread, run_queued_jobs, wait_committed
from memq.workers.consolidate import request_event

pytestmark = [pytest.mark.redis, pytest.mark.model, pytest.mark.slow]

MARKER = "qzvmarker7731"
OLD = datetime.now(UTC) - timedelta(days=3)


@pytest.fixture
def config(config: Config) -> Config:
    return config.replace(consolidation=ConsolidationConfig(
        chunk_size=4, min_chunk_chars=0, min_age_hours=1))


@pytest.fixture(params=["at once", "in steps"])
def erased(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> str:
    """A forget erased in its own transaction, or hidden and erased in steps of two
    messages (store/projections/erasure_steps.py): the same end either way."""
    if request.param == "in steps":
        monkeypatch.setattr(erasure_steps, "STEP", 2)
        monkeypatch.setattr(erasure_steps, "EVENT_STEP", 3)
    return str(request.param)


@pytest.fixture
def stack(config: Config, writer: WriterThread) -> Iterator[tuple[MemoryClient, MemoryClient]]:
    """The client that plants and forgets, and another process's client that reads."""
    redis.Redis.from_url(config.redis_url).config_set("rdbcompression", "no")  # raw DUMPs
    default = config.replace(retrieval=RetrievalConfig())  # recall: contextual keys too
    with MemoryClient(config=config) as planter, MemoryClient(config=default) as reader:
        yield planter, reader


def plant(client: MemoryClient, session: str, user: str, agent: str | None = None) -> None:
    """The marker in every place a conversation reaches."""
    turns = [f"My locker code is {MARKER}, please remember it.",
             "Noted, I will keep it safe.",
             f"Tool output:\n{('log line ' * 300)}\nfound {MARKER} at the end",
             f"Also the backup code is {MARKER}-b.",
             "Anything else?", "No, that is all for now."]
    for i, text in enumerate(turns):
        client.append(session, "user" if i % 2 == 0 else "assistant", text, user_id=user,
                      agent_id=agent, created_at=OLD + timedelta(minutes=i))
    client.record_tool_call(session, "open_locker", {"code": MARKER})
    client.record_tool_call(session, "close_locker", {"code": MARKER})
    client.flush()


def plant_rejected(client: MemoryClient, session: str) -> None:
    """A turn the writer sets aside (the session is someone else's), marker inside: its
    raw bytes are kept in `rejected_events` and its report goes to Redis."""
    from memq.clock import now_rfc3339, uuid7
    from memq.events import Event, EventType

    client.outbox.send(Event(uuid7(), EventType.MESSAGE_APPENDED, session, now_rfc3339(), {
        "message_id": uuid7(), "role": "user", "content": f"mallory says {MARKER}",
        "importance": 0.5, "user_id": "mallory"}))
    with pytest.raises(EventsRejected, match="belongs to user"):
        client.flush()


def bystander(client: MemoryClient) -> None:
    """Another user's turns, which must come through untouched."""
    client.append("bob-1", "user", "My locker code is 4242, please remember it.",
                  user_id="bob", created_at=OLD)
    client.flush()


def process_everything(config: Config, client: MemoryClient) -> None:
    """Embed, summarise (and embed the summaries), as the workers would."""
    run_queued_jobs(config, names.QUEUE_EMBED)
    client.outbox.send(request_event(min_age_hours=0))
    client.flush()
    wait_committed(redis.Redis.from_url(config.redis_url))
    run_queued_jobs(config, names.QUEUE_CONSOLIDATE)
    run_queued_jobs(config, names.QUEUE_EMBED)


def redis_bytes(connection: redis.Redis) -> Iterator[tuple[str, bytes]]:
    """Every key's value, serialised (DUMP) and read by type; zlib data (RQ's job data)
    decompressed too."""
    for key in connection.scan_iter(count=1000):
        name = key.decode()
        dumped = connection.dump(key) or b""
        yield name, dumped
        for value in _values(connection, key):
            yield name, value
            yield name, _inflated(value)


def _inflated(value: bytes) -> bytes:
    try:
        return zlib.decompress(value)
    except zlib.error:
        return b""


def _values(connection: redis.Redis, key: bytes) -> list[bytes]:
    kind = connection.type(key).decode()
    if kind == "string":
        return [connection.get(key) or b""]
    if kind == "hash":
        return [v for pair in connection.hgetall(key).items() for v in pair]
    if kind == "list":
        return list(connection.lrange(key, 0, -1))
    if kind == "set":
        return list(connection.smembers(key))
    if kind == "zset":
        return list(connection.zrange(key, 0, -1))
    if kind == "stream":
        return [v for _, fields in connection.xrange(key) for pair in fields.items()
                for v in pair]
    return []


def traces(config: Config) -> list[str]:
    """Where the marker still is: files and Redis keys."""
    found = [path for path in (config.db_path, f"{config.db_path}-wal")
             if Path(path).exists() and MARKER.encode() in Path(path).read_bytes()]
    connection = redis.Redis.from_url(config.redis_url)
    found += sorted({name for name, value in redis_bytes(connection)
                     if MARKER.encode() in value})
    return found


def cached_erased_vectors(reader: MemoryClient) -> set[str]:
    """Ids of forgotten messages whose vectors this client still holds in memory."""
    with reader.readers.connection() as conn:
        erased = {str(r[0]) for r in conn.execute("SELECT message_id FROM erased_messages")}
    entries = list(reader.vector_cache._entries.values())
    cached = {mid for entry in entries for mid in entry.index._ids}
    keys = {mid for entry in entries if entry.keys is not None for mid in entry.keys.index._ids}
    return (cached | keys) & erased


def cache_the_user(reader: MemoryClient, session: str) -> None:
    """Another process reads the user's sessions: their vectors and owners are cached."""
    items = reader.get_context(session, "What is my locker code?", scope="user")
    assert any(MARKER in item.content for item in items)
    assert reader.vector_cache.vector_count() > 0


def test_the_marker_is_everywhere_before(
    config: Config, stack: tuple[MemoryClient, MemoryClient]
) -> None:
    # The check itself must be able to see the marker where it is.
    planter, _ = stack
    plant(planter, "alice-1", "alice")
    process_everything(config, planter)
    plant_rejected(planter, "alice-1")
    places = traces(config)
    assert {config.db_path, f"{config.db_path}-wal"} & set(places)
    assert any(name.startswith("rq:job:memq-") for name in places)
    with planter.readers.connection() as conn:
        summaries = conn.execute("SELECT content FROM messages WHERE role = 'system'").fetchall()
        rejected = conn.execute("SELECT raw FROM rejected_events").fetchall()
    assert any(MARKER in row[0] for row in summaries)
    assert any(MARKER.encode() in bytes(row[0]) for row in rejected)


def test_forget_session_leaves_no_trace(
    config: Config, erased: str, stack: tuple[MemoryClient, MemoryClient]
) -> None:
    planter, reader = stack
    plant(planter, "alice-1", "alice", "locksmith")
    planter.append("alice-2", "user", "Where did I put my keys?", user_id="alice",
                   agent_id="locksmith")
    plant_rejected(planter, "alice-1")
    bystander(planter)
    process_everything(config, planter)
    planter.append("alice-1", "user", f"one more {MARKER} turn, not embedded yet")
    planter.flush()
    cache_the_user(reader, "alice-2")

    outcome = planter.wait_forgotten(planter.forget_session("alice-1"))

    assert outcome["messages"] >= 8  # six turns, one more, a summary or two
    assert outcome["jobs"] >= 1  # at least the queued embed job of the last turn
    assert traces(config) == []
    for scope in ("session", "user", "agent"):
        items = reader.get_context("alice-2", f"locker code {MARKER}", scope=scope)
        assert not any(MARKER in item.content for item in items)
        assert {item.session_id for item in items} <= {"alice-2"}
        assert cached_erased_vectors(reader) == set()
    assert reader.sessions(user_id="alice")[0].session_id == "alice-2"
    assert [m.content for m in planter.history("bob-1")] == [
        "My locker code is 4242, please remember it."]
    assert main(["rebuild", "--check", "--db", config.db_path]) == 0


def test_forget_message_leaves_no_trace_of_it_and_keeps_the_rest(
    config: Config, stack: tuple[MemoryClient, MemoryClient]
) -> None:
    planter, reader = stack
    # Two chunks; the extractive summariser picks the marker's sentence for the first.
    turns = ["Hello there, I need some help with travel plans for this spring.",
             "Of course, tell me where you would like to go and when.",
             f"Please book my Lisbon trip in May, passport number {MARKER}.",
             "Sure, I will look at flights and hotels and come back to you.",
             "Which neighbourhood of Lisbon should I stay in for the old town and the river?",
             "Alfama is charming, full of narrow streets and close to the river; stay there."]
    ids = [planter.append("trip-1", "user" if i % 2 == 0 else "assistant", text,
                          user_id="alice", created_at=OLD + timedelta(minutes=i))
           for i, text in enumerate(turns)]
    planter.flush()
    process_everything(config, planter)  # embedded, and summarised with the marker
    summaries = [m.content for m in planter.history("trip-1") if m.role == "system"]
    assert len(summaries) == 2
    assert MARKER in summaries[0]
    cache_the_user(reader, "trip-1")

    outcome = planter.wait_forgotten(planter.forget_message("trip-1", ids[2]))

    assert (outcome["kind"], outcome["messages"]) == ("message", 2)  # the turn, its summary
    assert traces(config) == []
    assert turns[4].encode() in Path(config.db_path).read_bytes()  # the grep would see it
    turns_left = [m for m in reader.history("trip-1") if m.role != "system"]
    assert [(m.id, m.content) for m in turns_left] == [
        (mid, text) for i, (mid, text) in enumerate(zip(ids, turns, strict=True)) if i != 2]
    assert [m.content for m in reader.history("trip-1") if m.role == "system"] == summaries[1:]
    items = reader.get_context("trip-1", "Where should I stay in Lisbon? Alfama hotel")
    assert not any(MARKER in item.content for item in items)
    assert any(item.id == ids[4] and "semantic" in item.branches for item in items)
    assert cached_erased_vectors(reader) == set()
    [info] = reader.sessions(user_id="alice")
    assert info.message_count == 5
    assert main(["rebuild", "--check", "--db", config.db_path]) == 0


def test_forget_user_leaves_no_trace(
    config: Config, erased: str, stack: tuple[MemoryClient, MemoryClient]
) -> None:
    planter, reader = stack
    plant(planter, "alice-1", "alice")
    plant(planter, "alice-2", "alice", "travel")
    planter.set_fact("security", "locker", MARKER, user_id="alice")
    planter.set_fact("security", "policy", "change codes monthly")  # global: stays
    plant_rejected(planter, "alice-2")
    bystander(planter)
    process_everything(config, planter)
    cache_the_user(reader, "alice-2")

    outcome = planter.wait_forgotten(planter.forget_user("alice"))

    assert outcome["kind"] == "user"
    assert erased == "at once" or outcome["messages"] > erasure_steps.STEP
    assert traces(config) == []
    assert reader.sessions(user_id="alice") == []
    assert reader.get_context("alice-2", "locker code", scope="user") == []
    assert cached_erased_vectors(reader) == set()
    assert [f.value for f in reader.facts(user_id="alice")] == ["change codes monthly"]
    assert [s.session_id for s in reader.sessions()] == ["bob-1"]
    assert main(["rebuild", "--check", "--db", config.db_path]) == 0


@pytest.mark.parametrize("steps_before_the_crash", [0, 2])
def test_a_writer_stopped_mid_erasure_finishes_it_when_it_starts_again(
    config: Config, monkeypatch: pytest.MonkeyPatch, steps_before_the_crash: int
) -> None:
    """The user is hidden at once; the writer stops after a few steps (none: right after
    the forget's own commit); the next writer goes on from the database and finishes."""
    monkeypatch.setattr(erasure_steps, "STEP", 2)
    real_step, ran, crashed = erasure_steps.step, [], threading.Event()

    def step_then_crash(*args: Any) -> bool:
        if len(ran) >= steps_before_the_crash:
            crashed.set()
            return False  # as if the writer had died here: nothing more is done
        ran.append(1)
        return real_step(*args)

    monkeypatch.setattr(erasure_steps, "step", step_then_crash)
    with WriterThread(config), MemoryClient(config=config) as client:
        plant(client, "alice-1", "alice")
        forgotten = client.forget_user("alice")
        client.flush()
        assert client.history("alice-1") == []
        assert client.get_context("alice-1", f"locker code {MARKER}", scope="user") == []
        # The steps run between batches, after the forget's commit: wait for the crash
        # point, or the writer may be stopped before the steps the test means to run.
        assert crashed.wait(30)
    assert len(ran) == steps_before_the_crash
    with sqlite_file(config) as conn:
        assert conn.execute("SELECT count(*) FROM erasing").fetchone() == (1,)
    monkeypatch.setattr(erasure_steps, "step", real_step)
    with WriterThread(config), MemoryClient(config=config) as client:
        outcome = client.wait_forgotten(forgotten)
    assert outcome["messages"] == 6
    assert traces(config) == []
    assert main(["rebuild", "--check", "--db", config.db_path]) == 0


def test_forgetting_a_message_of_a_user_being_erased_waits_until_it_is_gone(
    config: Config, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The user's forget is under way (its steps held back); forgetting one of its
    messages finishes that erasure first, so its outcome comes once the text is gone."""
    from memq.store.write.writer import Writer

    monkeypatch.setattr(erasure_steps, "STEP", 1)
    monkeypatch.setattr(Writer, "erase_step", lambda self, stop=None: False)  # the loop runs none
    with WriterThread(config), MemoryClient(config=config) as client:
        plant(client, "alice-1", "alice")
        secret = [m.id for m in client.history("alice-1") if MARKER in m.content][-1]
        client.forget_user("alice")
        client.flush()
        with sqlite_file(config) as conn:
            assert conn.execute("SELECT count(*) FROM erasing").fetchone() == (1,)
        outcome = client.wait_forgotten(client.forget_message("alice-1", secret))
    assert outcome["messages"] == 0  # the user's forget erased it, just before
    with sqlite_file(config) as conn:
        assert conn.execute("SELECT count(*) FROM erasing").fetchone() == (0,)
    assert traces(config) == []


@contextmanager
def sqlite_file(config: Config) -> Iterator[apsw.Connection]:
    conn = apsw.Connection(config.db_path, flags=apsw.SQLITE_OPEN_READONLY)
    try:
        yield conn
    finally:
        conn.close()


def test_an_agent_may_forget_a_session_or_a_message_but_not_a_user(
    config: Config, writer: WriterThread, monkeypatch: pytest.MonkeyPatch
) -> None:
    from memq.authority import Role

    with MemoryClient(config=config) as agent:
        monkeypatch.setattr(type(agent.outbox), "role", property(lambda self: Role.AGENT))
        monkeypatch.setattr(type(agent.outbox), "resolve_role",
                            lambda self, action: Role.AGENT)
        agent.append("s1", "user", "hello", user_id="u1")
        agent.forget_message("s1", agent.append("s1", "user", "oops", user_id="u1"))
        agent.forget_session("s1")
        with pytest.raises(PermissionDenied, match=r"user\.forgotten may only come from admin"):
            agent.forget_user("u1")
        agent.flush()


@pytest.mark.parametrize(("call", "args", "message"), [
    ("forget_session", ("",), "session_id must not be empty"),
    ("forget_session", ("a\nb",), "session_id contains a control character"),
    ("forget_message", ("", "m1"), "session_id must not be empty"),
    ("forget_message", ("s1", "a\nb"), "message_id contains a control character"),
    ("forget_message", ("s1", None), "message_id must be a string"),
    ("forget_user", (" ",), "user_id must not be empty"),
    ("forget_user", (42,), "user_id must be a string"),
    ("wait_forgotten", ("",), "event_id must not be empty"),
])
@pytest.mark.remote_too
def test_bad_arguments(idle_client: MemoryClient, call: str, args: tuple[Any, ...],
                       message: str) -> None:
    with pytest.raises(ValidationError, match=message):
        getattr(idle_client, call)(*args)


@pytest.mark.remote_too
def test_waiting_for_an_unknown_forget_says_so_at_once(client: MemoryClient) -> None:
    """Not a timeout: the id names no committed event, or one that is not a forget."""
    with pytest.raises(NotFound, match="unknown forget 01a00000-0000-7000-8000-00000000dead"):
        client.wait_forgotten("01a00000-0000-7000-8000-00000000dead", timeout=30)
    client.append("s1", "user", "hello")
    fact = client.set_fact("c", "k", "v")
    with pytest.raises(ValidationError, match=r"is a fact\.set event, not a forget"):
        client.wait_forgotten(fact, timeout=30)
    forgot = client.forget_session("s1")
    assert client.wait_forgotten(forgot, timeout=30)["event_id"] == forgot


def test_the_command_line_asks_before_it_erases(
    config: Config, stack: tuple[MemoryClient, MemoryClient],
    capsys: pytest.CaptureFixture[str],
) -> None:
    planter, _ = stack
    plant(planter, "alice-1", "alice")
    args = ["--db", config.db_path, "--redis-url", config.redis_url]
    assert main(["forget", "user", "alice", *args]) == 2
    assert "cannot be undone: pass --yes" in capsys.readouterr().err
    assert main(["forget", "user", "alice", "--yes", *args]) == 0
    out = capsys.readouterr().out
    assert out.startswith("forgot user 'alice': 6 message(s), ")
    assert planter.sessions(user_id="alice") == []


def test_the_command_line_forgets_one_message(
    config: Config, stack: tuple[MemoryClient, MemoryClient],
    capsys: pytest.CaptureFixture[str],
) -> None:
    planter, _ = stack
    ids = [planter.append("s9", "user", text, user_id="bob")
           for text in ("keep this one", f"{MARKER} goes", "and this one")]
    planter.flush()
    args = ["--db", config.db_path, "--redis-url", config.redis_url]
    assert main(["forget", "message", "s9", ids[1], *args]) == 2
    assert f"forgetting message 's9' '{ids[1]}' cannot be undone" in capsys.readouterr().err
    assert main(["forget", "message", "s9", ids[1], "--yes", *args]) == 0
    assert capsys.readouterr().out.startswith(f"forgot message 's9' '{ids[1]}': 1 message(s), ")
    assert [m.id for m in planter.history("s9")] == [ids[0], ids[2]]
    # An id the session does not hold erases nothing, and says so; an empty one is refused.
    assert main(["forget", "message", "s9", "no-such-id", "--yes", *args]) == 0
    assert "forgot message 's9' 'no-such-id': 0 message(s)" in capsys.readouterr().out
    assert main(["forget", "message", "s9", "", "--yes", *args]) == 2
    assert "message_id must not be empty" in capsys.readouterr().err


def test_redis_rewrites_its_append_only_file(tmp_path: Path, config: Config) -> None:
    """With Redis persisting to an append-only file (as `memq up` runs it), the file no
    longer holds what was forgotten once the forget is done."""

    from memq.testing import RedisServer

    redis_dir = tmp_path / "redis"
    redis_dir.mkdir()
    with RedisServer(redis_dir, appendonly=True) as server:
        config = config.replace(redis_url=server.url)
        with WriterThread(config), MemoryClient(config=config) as client:
            plant(client, "alice-1", "alice")
            outcome = client.wait_forgotten(client.forget_session("alice-1"))
            assert outcome["aof_rewritten"] is True
            # Read at once, no waiting for Redis: done means the file holds none of it.
            files = [p for p in redis_dir.rglob("*") if p.is_file()]
            assert files  # the append-only file (Redis 7: a directory of them)
            assert [p.name for p in files if MARKER.encode() in p.read_bytes()] == []


def test_forgets_in_quick_succession_each_wait_for_a_rewrite_of_their_own(
    tmp_path: Path, config: Config
) -> None:
    """The second forget's rewrite is refused while the first's runs ("rewriting already in
    progress"): done must still mean that a rewrite after its deletes has ended."""
    from memq.testing import RedisServer

    redis_dir = tmp_path / "redis"
    redis_dir.mkdir()
    with RedisServer(redis_dir, appendonly=True) as server:
        config = config.replace(redis_url=server.url)
        with WriterThread(config), MemoryClient(config=config) as client:
            sessions = [f"quick-{i}" for i in range(4)]
            for session in sessions:
                plant(client, session, f"user-{session}")
            forgets = [client.forget_session(session) for session in sessions]
            for forget in forgets:
                assert client.wait_forgotten(forget)["aof_rewritten"] is True
            files = [p for p in redis_dir.rglob("*") if p.is_file()]
            assert [p.name for p in files if MARKER.encode() in p.read_bytes()] == []
