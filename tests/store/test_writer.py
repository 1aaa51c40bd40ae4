"""The writer: batches, idempotency, rejections, the single-writer lock, SIGTERM, SIGKILL."""

from __future__ import annotations

import signal
import subprocess
import threading
import time
from pathlib import Path

import apsw
import orjson
import pytest
import redis

from memq import MemoryClient, names
from memq.clock import now_rfc3339, uuid7
from memq.config import Config, WriterConfig
from memq.errors import WriterAlreadyRunning, WriterFailed
from memq.events import Event, EventType, encode
from memq.store import lexical
from memq.store.write.writer import Writer
from memq.testing import WriterThread
from tests.conftest import ROOT, memq_command, start_writer_process
from tests.scheduled import eventually

pytestmark = pytest.mark.redis


def db(config: Config) -> apsw.Connection:
    return apsw.Connection(config.db_path, flags=apsw.SQLITE_OPEN_READONLY)


def count(config: Config, sql: str) -> int:
    return int(db(config).execute(sql).fetchall()[0][0])


def message_event(session: str = "s1", content: str = "hi") -> Event:
    return Event(
        id=uuid7(), type=EventType.MESSAGE_APPENDED, session_id=session,
        created_at=now_rfc3339(),
        payload={"message_id": uuid7(), "role": "user", "content": content, "importance": 0.5},
    )


def push(config: Config, *raws: bytes, stream: str = names.ADMIN_INBOX_STREAM) -> None:
    """Raw entries on ``stream``: the admin's by default, where any type is allowed."""
    client = redis.Redis.from_url(config.redis_url)
    for raw in raws:
        client.xadd(stream, {names.EVENT_FIELD: raw})


def test_appends_are_committed_and_acknowledged(client: MemoryClient, config: Config) -> None:
    ids = [client.append("s1", "user", f"m{i}") for i in range(50)]
    client.flush()
    assert count(config, "SELECT count(*) FROM messages") == 50
    assert count(config, "SELECT count(*) FROM events") == 50
    assert [m.id for m in client.history("s1", 100)] == ids
    assert client.redis.xlen(client.outbox.stream) == 0  # acknowledged entries are deleted


def test_an_idle_writer_merges_the_lexical_index(client: MemoryClient, config: Config) -> None:
    def segments() -> int:
        return count(config, "SELECT count(DISTINCT segid) FROM messages_fts_idx")

    for batch in range(3):  # a segment each; FTS5 alone merges a level of four
        client.append_many([{"session_id": "s1", "role": "user", "content": (
            f"batch {batch} turn {i} " + " ".join(f"w{batch}n{i}k{k}" for k in range(40)))}
            for i in range(20)])
        client.flush()
    # One segment a level at most: one or two, as the merges fell between the batches.
    eventually(lambda: segments() <= 2, "the index merged")
    assert len(client.history("s1", 100)) == 60
    assert any("w1n3k7" in item.content for item in client.get_context("s1", query="w1n3k7"))


def test_merging_and_erasing_take_turns_and_merging_waits_for_an_idle_moment(
        config: Config, monkeypatch: pytest.MonkeyPatch) -> None:
    writer = Writer.open(config, redis.Redis.from_url(config.redis_url))
    done: list[str] = []
    monkeypatch.setattr(writer, "tidy_step", lambda: done.append("merge") or True)
    monkeypatch.setattr(writer, "erase_step", lambda stop=None: done.append("erase") or True)
    try:
        writer.untidy = writer.erasing = True
        for idle in (True, True, True, False, False, True):
            writer.upkeep(idle=idle)
        assert done == ["merge", "erase", "merge", "erase", "erase", "merge"]
        writer.erasing, done[:] = False, []
        for _ in range(3):
            writer.upkeep(idle=True)
        assert done == ["merge"] * 3  # alone, a merge goes on while nothing else waits
    finally:
        writer.close()


def test_a_merge_that_cannot_commit_is_left_for_later_and_holds_nothing_up(
        config: Config, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    writer = Writer.open(config, redis.Redis.from_url(config.redis_url))

    def full(cur: apsw.Cursor) -> bool:
        raise apsw.FullError("database or disk is full")

    monkeypatch.setattr(lexical, "tidy", full)
    try:
        with caplog.at_level("WARNING", logger="memq.writer"):
            assert writer.tidy_step() is False  # not retried until the disk has room
        assert "merging the lexical index failed" in caplog.text
        assert writer.conn.get_autocommit()  # rolled back: the next batch may commit
    finally:
        writer.close()


def test_redelivered_event_is_a_no_op(client: MemoryClient, config: Config) -> None:
    raw = encode(message_event())
    push(config, raw, raw, raw)
    client.append("s1", "user", "marker")
    client.flush()
    assert count(config, "SELECT count(*) FROM messages") == 2
    assert count(config, "SELECT count(*) FROM rejected_events") == 0


BAD_ENTRIES = {
    "not json": (b"{nope", "not valid JSON"),
    "invalid utf-8": (b'{"id": "\xff\xfe"}', "not valid JSON"),
    "not an object": (b"[1, 2]", "must be a JSON object"),
    "unknown type": (
        orjson.dumps({"id": "x1", "type": "message.exploded", "v": 1, "session_id": "s",
                      "created_at": now_rfc3339(), "payload": {}}),
        "unknown event type 'message.exploded'",
    ),
    "unknown version": (
        encode(Event(**{**message_event().__dict__, "version": 9})),
        "unsupported version 9",
    ),
    "wrong type": (
        encode(Event(**{**message_event().__dict__,
                        "payload": {**message_event().payload, "importance": "high"}})),
        "payload.importance must be a number",
    ),
    "oversized content": (
        encode(message_event(content="x" * (64 * 1024 + 1))),
        "over the 65536 byte limit",
    ),
    "missing session": (
        encode(Event(**{**message_event().__dict__, "session_id": None})),
        "session_id must be a string",
    ),
    "naive timestamp": (
        encode(Event(**{**message_event().__dict__, "created_at": "2026-01-01T00:00:00"})),
        "no time zone offset",
    ),
    "NUL in content": (encode(message_event(content="a\x00b")), "NUL character"),
    "embedding for unknown message": (
        encode(Event(id=uuid7(), type=EventType.MESSAGE_EMBEDDED, session_id=None,
                     created_at=now_rfc3339(),
                     payload={"message_id": "nope", "model": "m", "dim": 1,
                              "vector_b64": "AACAPw=="})),
        "unknown message nope",
    ),
}


@pytest.mark.parametrize("name", sorted(BAD_ENTRIES))
def test_bad_entry_is_set_aside_and_batch_commits(
    name: str, client: MemoryClient, config: Config
) -> None:
    raw, reason = BAD_ENTRIES[name]
    before = encode(message_event(content="before"))
    push(config, before, raw)
    client.append("s1", "user", "after")
    client.flush()
    rows = db(config).execute("SELECT reason, raw FROM rejected_events").fetchall()
    assert len(rows) == 1
    assert reason in rows[0][0]
    assert bytes(rows[0][1]) == raw
    assert count(config, "SELECT count(*) FROM messages") == 2


def test_entry_without_event_field_is_rejected(client: MemoryClient, config: Config) -> None:
    redis.Redis.from_url(config.redis_url).xadd(names.INBOX_STREAM, {"other": "x"})
    client.append("s1", "user", "after")
    client.flush()
    reasons = [r[0] for r in db(config).execute("SELECT reason FROM rejected_events")]
    assert reasons == ["entry has no 'event' field"]


def test_rejected_event_can_be_replayed(client: MemoryClient, config: Config) -> None:
    ok = encode(message_event(content="valid after all"))
    push(config, b"garbage")
    client.append("s1", "user", "x")
    client.flush()
    conn = redis.Redis.from_url(config.redis_url)
    # Replaying a valid raw entry (as an operator would after fixing it) marks the row; the
    # replay comes on the stream the rejected entry came from.
    conn.xadd(names.ADMIN_INBOX_STREAM, {names.EVENT_FIELD: ok, names.REPLAY_FIELD: b"1"})
    client.append("s1", "user", "y")
    client.flush()
    row = db(config).execute("SELECT replayed_at FROM rejected_events WHERE id = 1").fetchone()
    assert row[0] is not None
    assert count(config, "SELECT count(*) FROM messages") == 3


def test_duplicate_message_id_under_new_event_is_rejected(
    client: MemoryClient, config: Config
) -> None:
    first = message_event()
    second = Event(**{**message_event().__dict__, "payload": first.payload})
    push(config, encode(first), encode(second))
    client.append("s1", "user", "x")
    client.flush()
    reasons = [r[0] for r in db(config).execute("SELECT reason FROM rejected_events")]
    assert reasons == [f"message {first.payload['message_id']} already exists"]


def test_a_huge_entry_is_set_aside_cut_and_its_neighbours_commit(
    client: MemoryClient, config: Config
) -> None:
    huge = b'{"id": "' + b"x" * (20 * 1024 * 1024) + b'"}'  # 20 MB: 20 times the limit
    push(config, huge)
    client.append("s1", "user", "after")
    client.flush()
    [(raw, reason)] = db(config).execute("SELECT raw, reason FROM rejected_events").fetchall()
    limit = config.limits.max_payload_bytes
    assert len(raw) == 2 * limit
    assert bytes(raw) == huge[: 2 * limit]
    assert reason == (f"event is {len(huge)} bytes, over the {limit} limit "
                      f"(only its first {2 * limit} bytes are kept)")
    assert count(config, "SELECT count(*) FROM messages") == 1


def test_an_event_id_reused_with_other_content_is_rejected_not_dropped(
    client: MemoryClient, config: Config
) -> None:
    first = message_event(content="first")
    same = encode(first)
    other = encode(Event(**{**message_event(content="other").__dict__, "id": first.id}))
    later = encode(Event(**{**message_event(content="later").__dict__, "id": first.id}))
    push(config, encode(first), other, same)  # one batch: the fast path finds the clash
    client.flush()
    push(config, later, same)  # a later batch: the clash is with the log
    client.append("s1", "user", "marker")
    client.flush()
    rows = db(config).execute("SELECT raw, reason FROM rejected_events ORDER BY id").fetchall()
    reason = f"event id {first.id} is already in the log with different content"
    assert [(bytes(raw), why.split(";")[0]) for raw, why in rows] == [
        (other, reason), (later, reason)]
    contents = [c for (c,) in db(config).execute("SELECT content FROM messages ORDER BY seq")]
    assert contents == ["first", "marker"]  # a redelivery of the same event is a no-op


def test_a_dead_inbox_reader_stops_the_writer_and_its_heartbeat(
    config: Config, monkeypatch: pytest.MonkeyPatch
) -> None:
    from memq.store.write.inbox import Inbox
    from memq.store.write.service import open_writer

    reads = 0

    def read_new(self: Inbox) -> list[object]:
        nonlocal reads
        reads += 1
        if reads > 3:  # a bug the reader does not expect, after a heartbeat was written
            raise RuntimeError("boom")
        time.sleep(0.05)
        return []

    monkeypatch.setattr(Inbox, "read_new", read_new)
    broker = redis.Redis.from_url(config.redis_url)
    writer = open_writer(config, broker)
    try:
        with pytest.raises(WriterFailed, match=r"inbox reader died \(RuntimeError: boom\)"):
            writer.run(threading.Event())
    finally:
        writer.close()
    assert reads == 4
    assert broker.get(names.WRITER_HEARTBEAT_KEY) is None  # status sees it down at once


@pytest.mark.filterwarnings("ignore::pytest.PytestUnhandledThreadExceptionWarning")  # on purpose
def test_a_dead_follow_up_thread_stops_the_writer(config: Config) -> None:
    from memq.store.write.service import open_writer

    def die() -> None:
        raise SystemExit("a follow-up that kills its thread")

    broker = redis.Redis.from_url(config.redis_url)
    writer = open_writer(config, broker)
    writer.background.submit(die)
    try:
        with pytest.raises(WriterFailed, match="its follow-up thread died"):
            writer.run(threading.Event())
    finally:
        writer.close()
    assert broker.get(names.WRITER_HEARTBEAT_KEY) is None


def test_second_writer_refuses_to_start(writer: WriterThread, config: Config) -> None:
    with pytest.raises(WriterAlreadyRunning, match="another writer"):
        Writer.open(config, redis.Redis.from_url(config.redis_url))


def test_second_writer_process_exits_with_message(writer: WriterThread, config: Config) -> None:
    done = subprocess.run(
        memq_command("writer", "--db", config.db_path, "--redis-url", config.redis_url),
        capture_output=True, text=True, timeout=60, cwd=ROOT,
    )
    assert done.returncode == 1
    assert "another writer" in done.stderr
    assert "Traceback" not in done.stderr


def test_sigterm_finishes_and_exits_zero(config: Config) -> None:
    proc = start_writer_process(config)
    with MemoryClient(config=config) as memory:
        for i in range(200):
            memory.append("s1", "user", f"m{i}")
        memory.flush(60)
    proc.send_signal(signal.SIGTERM)
    assert proc.wait(30) == 0


def test_database_and_wal_are_private(client: MemoryClient, config: Config) -> None:
    client.append("s1", "user", "secret")
    client.flush()
    assert Path(config.db_path).stat().st_mode & 0o777 == 0o600
    assert Path(config.db_path + "-wal").stat().st_mode & 0o777 == 0o600


def test_stale_pending_entries_are_reclaimed(config: Config) -> None:
    """An entry delivered but never committed (a lost ack) is applied by the periodic pass."""
    raw = encode(message_event(content="stuck"))
    conn = redis.Redis.from_url(config.redis_url)
    conn.xgroup_create(names.INBOX_STREAM, names.WRITER_GROUP, id="0", mkstream=True)
    conn.xadd(names.INBOX_STREAM, {names.EVENT_FIELD: raw})
    conn.xreadgroup(names.WRITER_GROUP, names.WRITER_CONSUMER, {names.INBOX_STREAM: ">"})
    writer = Writer.open(config, conn)
    try:
        writer.reconcile()  # idle for less than the default minute: left alone
        assert count(config, "SELECT count(*) FROM messages") == 0
        writer.config = config.replace(writer=WriterConfig(stale_after_s=0))
        writer.reconcile()
        assert count(config, "SELECT count(*) FROM messages") == 1
        assert conn.xpending(names.INBOX_STREAM, names.WRITER_GROUP)["pending"] == 0
    finally:
        writer.close()


def test_entries_delivered_without_a_reply_are_read_again_after_a_broken_connection(
    config: Config,
) -> None:
    """Redis may deliver entries whose reply is lost with the connection: the writer reads
    its pending entries again after any broken connection, before the commit position
    moves past them (else flush would return with them still unapplied)."""
    running = WriterThread(config.replace(writer=WriterConfig(stale_after_s=3600)))
    running.start()
    try:
        with MemoryClient(config=config) as memory:
            memory.append("s1", "user", "the writer is up")
            memory.flush(30)
        thief = redis.Redis.from_url(config.redis_url)
        # Deliver five entries to the writer's consumer as a dropped reply would: pending
        # under its name, never seen by it. In one MULTI, so the blocked writer cannot
        # take them first; then handed to the writer's consumer name.
        pipe = thief.pipeline(transaction=True)
        for i in range(5):
            raw = encode(message_event(content=f"lost reply {i}"))
            pipe.xadd(names.INBOX_STREAM, {names.EVENT_FIELD: raw})
        pipe.xreadgroup(names.WRITER_GROUP, "thief", {names.INBOX_STREAM: ">"}, count=5)
        *ids, _ = pipe.execute()
        thief.xclaim(names.INBOX_STREAM, names.WRITER_GROUP, names.WRITER_CONSUMER, 0, ids)
        for client in thief.client_list():
            if client["id"] != str(thief.client_id()):
                thief.client_kill_filter(_id=client["id"])
        with MemoryClient(config=config) as memory:
            memory.append("s1", "user", "after the broken connection")
            memory.flush(30)
        assert count(config, "SELECT count(*) FROM messages") == 7
    finally:
        running.stop()


def test_redis_flushed_between_group_creation_and_the_pending_drain(config: Config) -> None:
    """FLUSHALL right after the writer made its consumer group: the first read of pending
    entries answers NOGROUP. The writer claims the keyspace again, re-creates its group and
    goes on; it used to retry that read for ever and commit nothing."""
    from memq.store.write.service import open_writer

    broker = redis.Redis.from_url(config.redis_url)
    writer = open_writer(config, redis.Redis.from_url(config.redis_url))
    made = writer.inbox.ensure_group

    def made_then_flushed() -> None:
        made()
        if not flushed.is_set():
            broker.flushall()
            flushed.set()

    flushed = threading.Event()
    writer.inbox.ensure_group = made_then_flushed  # type: ignore[method-assign]
    stop = threading.Event()
    thread = threading.Thread(target=writer.run, args=(stop,), daemon=True)
    thread.start()
    try:
        # An append sent before the FLUSHALL would be wiped with everything else.
        assert flushed.wait(30)
        with MemoryClient(config=config) as client:
            client.append("after-flush", "user", "still committed")
            client.flush(20)
            assert [m.content for m in client.history("after-flush")] == ["still committed"]
        assert flushed.is_set()
        assert broker.exists(names.DATABASE_KEY)  # claimed again, not only at the next beat
        for stream in names.INBOX_STREAMS:
            groups = broker.xinfo_groups(stream)
            assert [g["name"] for g in groups] == [names.WRITER_GROUP.encode()]
    finally:
        stop.set()
        thread.join(30)
        writer.close()
