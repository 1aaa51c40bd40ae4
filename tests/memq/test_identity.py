"""One Redis keyspace, one database: a writer of another database refuses to start.

Reproduced before: two writers with two databases on one Redis each applied part of the
stream (2,000 appends ended up 859 / 1,141), silently.
"""

from __future__ import annotations

import subprocess
import threading
import time
from pathlib import Path

import pytest
import redis

from memq import MemoryClient, names
from memq.config import Config
from memq.errors import DatabaseMismatch
from memq.identity import Claim, bind, current
from memq.store.write import writer as writer_module
from memq.testing import WriterThread
from tests.conftest import ROOT, memq_command

pytestmark = pytest.mark.redis


@pytest.fixture
def broker(redis_url: str) -> redis.Redis:
    return redis.Redis.from_url(redis_url)


def other(config: Config, tmp_path: Path, name: str = "other.db") -> Config:
    return config.replace(db_path=str(tmp_path / name))


def test_bind_claims_then_recognises_then_refuses(broker: redis.Redis) -> None:
    mine = Claim("a" * 32, "/data/memq.db", "host-a", "2026-01-01T00:00:00Z")
    bind(broker, mine)
    assert current(broker) == mine
    bind(broker, mine)  # the same database again: fine
    moved = Claim(mine.database_id, "/new/place.db", "host-b", "2026-02-01T00:00:00Z")
    bind(broker, moved)
    assert current(broker) == moved  # the same database, moved: the claim follows it
    theirs = Claim("b" * 32, "/elsewhere.db", "host-c", "2026-03-01T00:00:00Z")
    with pytest.raises(DatabaseMismatch) as caught:
        bind(broker, theirs, url="redis://r")
    message = str(caught.value)
    assert f"Redis redis://r belongs to database {'a' * 32} (/new/place.db on host-b)" in message
    assert f"this writer's database {'b' * 32} (/elsewhere.db on host-c)" in message
    assert "`memq writer --rebind`" in message
    assert current(broker) == moved
    bind(broker, theirs, rebind=True)
    assert current(broker) == theirs


def test_an_unreadable_claim_is_not_taken_over_silently(broker: redis.Redis) -> None:
    broker.set(names.DATABASE_KEY, b"\xff not json")
    with pytest.raises(DatabaseMismatch, match=r"belongs to database \(unreadable\)"):
        bind(broker, Claim("a" * 32, "/d.db", "h", "t"))


def test_a_second_database_cannot_split_the_inbox(
    config: Config, tmp_path: Path, broker: redis.Redis
) -> None:
    with WriterThread(config) as first:
        claim = current(broker)
        assert claim is not None
        assert first.writer is not None
        assert claim.database_id == first.writer.claim.database_id
        assert claim.path == str(Path(config.db_path).resolve())
        with pytest.raises(DatabaseMismatch, match=f"belongs to database {claim.database_id}"):
            WriterThread(other(config, tmp_path)).start()
        with MemoryClient(config=config) as client, client.batched():
            sent = [client.append("s", "user", f"turn {i}") for i in range(2000)]
        client.flush(60)
        assert [m.id for m in client.history("s", 10_000)] == sent  # all of them, here
    assert current(broker) == claim


def test_the_same_database_restarted_or_moved_is_welcome(
    config: Config, tmp_path: Path, broker: redis.Redis
) -> None:
    with WriterThread(config):
        pass
    moved = other(config, tmp_path, "moved.db")
    Path(config.db_path).rename(moved.db_path)
    with WriterThread(moved):
        claim = current(broker)
        assert claim is not None
        assert claim.path == str(Path(moved.db_path).resolve())


def test_rebind_hands_the_inbox_to_the_new_database(
    config: Config, tmp_path: Path, broker: redis.Redis
) -> None:
    with WriterThread(config):
        pass
    with MemoryClient(config=config) as client:
        waiting = client.append("s", "user", "sent while no writer ran")
    replacement = other(config, tmp_path)
    with WriterThread(replacement, rebind=True) as running:
        assert running.writer is not None
        claim = current(broker)
        assert claim is not None
        assert claim.database_id == running.writer.claim.database_id
        with MemoryClient(config=replacement) as client:
            client.append("s", "user", "after")
            client.flush()
            assert waiting in [m.id for m in client.history("s")]


def test_a_running_writer_claims_an_emptied_redis_again_and_stops_for_a_foreign_claim(
    config: Config, broker: redis.Redis, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(writer_module, "HEARTBEAT_INTERVAL_S", 0.05)
    died: list[BaseException | None] = []
    monkeypatch.setattr(threading, "excepthook", lambda args: died.append(args.exc_value))
    running = WriterThread(config)
    running.start()
    try:
        wait_for(lambda: broker.get(names.WRITER_HEARTBEAT_KEY) is not None, "the writer")
        mine = current(broker)
        broker.flushall()  # a Redis restarted without persistence
        wait_for(lambda: current(broker) == mine, "the writer to claim Redis again")
        bind(broker, Claim("f" * 32, "/foreign.db", "h", "t"), rebind=True)
        assert running.thread is not None
        thread = running.thread
        wait_for(lambda: not thread.is_alive(), "the writer to stop")
        assert broker.get(names.WRITER_HEARTBEAT_KEY) is None  # it does not look alive
        assert [type(exc) for exc in died] == [DatabaseMismatch]
    finally:
        running.stop()


def test_memq_writer_refuses_in_one_line_and_rebind_lets_it_start(
    config: Config, tmp_path: Path
) -> None:
    with WriterThread(config):
        pass
    command = memq_command("writer", "--db", str(tmp_path / "other.db"),
                           "--redis-url", config.redis_url)
    done = subprocess.run(command, cwd=ROOT, capture_output=True, text=True, timeout=60,
                          check=False)
    assert done.returncode == 1
    assert done.stderr.startswith("memq: error: Redis redis://127.0.0.1:")
    assert "belongs to database" in done.stderr
    assert len(done.stderr.strip().splitlines()) == 1
    rebound = subprocess.Popen([*command, "--rebind"], cwd=ROOT, stderr=subprocess.PIPE)
    try:
        connection = redis.Redis.from_url(config.redis_url)
        other = str((tmp_path / "other.db").resolve())
        # Not the heartbeat: the first writer's may still be alive for a few seconds.
        wait_for(lambda: getattr(current(connection), "path", None) == other,
                 "the rebound writer to claim the keyspace for its database")
    finally:
        rebound.terminate()
        assert rebound.wait(30) == 0


def wait_for(condition: object, what: str, timeout: float = 30.0) -> None:
    deadline = time.monotonic() + timeout
    while not condition():  # type: ignore[operator]
        if time.monotonic() > deadline:
            pytest.fail(f"gave up waiting for {what}")
        time.sleep(0.02)


def test_claims_are_safe_under_a_race(broker: redis.Redis) -> None:
    claims = [Claim(f"{i:032x}", f"/db{i}", "h", "t") for i in range(8)]
    won: list[Claim] = []
    barrier = threading.Barrier(len(claims))

    def claim(each: Claim) -> None:
        barrier.wait()
        try:
            bind(broker, each)
            won.append(each)
        except DatabaseMismatch:
            pass

    threads = [threading.Thread(target=claim, args=(c,)) for c in claims]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert len(won) == 1
    assert current(broker) == won[0]
