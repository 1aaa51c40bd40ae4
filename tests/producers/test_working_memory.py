"""Working memory: cap, order, LRU eviction, hydration on first touch, read-your-writes."""

from __future__ import annotations

import threading
from datetime import UTC, datetime, timedelta

import pytest

from memq import MemoryClient
from memq.config import Config, MemoryConfig
from memq.events import EventType
from memq.producers.outbox import Position, Ticket
from memq.producers.working_memory import WorkingMemory
from memq.store.read.messages import Message
from memq.store.read.sessions import SessionSnapshot
from memq.testing import WriterThread

T0 = datetime(2026, 1, 1, tzinfo=UTC)


def msg(i: int, session: str = "s1", minutes: int | None = None) -> Message:
    when = T0 + timedelta(minutes=i if minutes is None else minutes)
    return Message(f"m{i:04d}", session, "user", f"turn {i}",
                   when.strftime("%Y-%m-%dT%H:%M:%S.%fZ"), 0.5)


class Database:
    """Committed history and marks per session, and a record of which sessions were loaded."""

    def __init__(self, history: dict[str, list[Message]] | None = None) -> None:
        self.history = history or {}
        self.marks = dict.fromkeys(self.history, 1)
        self.position = 1
        self.loads: list[str] = []

    def commit(self, message: Message) -> None:
        self.history.setdefault(message.session_id, []).append(message)
        self.position += 1
        self.marks[message.session_id] = self.position

    def load(self, session_id: str, limit: int) -> SessionSnapshot:
        self.loads.append(session_id)
        return SessionSnapshot(self.position, self.marks.get(session_id),
                               self.history.get(session_id, [])[-limit:])

    def mark(self, session_id: str) -> int | None:
        return self.marks.get(session_id)

    def memory(self, *, cap: int, max_sessions: int = 10,
               committed: Position | None = None) -> WorkingMemory:
        return WorkingMemory(self.load, self.mark, cap=cap, max_sessions=max_sessions,
                             commit_position=lambda: committed)


def ids(messages: list[Message]) -> list[str]:
    return [m.id for m in messages]


def sent(position: int | None) -> Ticket:
    return Ticket("event", None if position is None else (position, 0))


# -- the structure alone ----------------------------------------------------------------

def test_keeps_the_last_cap_turns_oldest_first() -> None:
    memory = Database().memory(cap=5)
    for i in range(12):
        memory.add(msg(i))
    assert ids(memory.recent("s1", 50)) == [f"m{i:04d}" for i in range(7, 12)]
    assert ids(memory.recent("s1", 2)) == ["m0010", "m0011"]
    assert memory.recent("s1", 0) == []


def test_loads_once_on_first_read() -> None:
    db = Database({"s1": [msg(i) for i in range(8)]})
    memory = db.memory(cap=5)
    assert ids(memory.recent("s1", 10)) == [f"m{i:04d}" for i in range(3, 8)]
    memory.recent("s1", 10)
    assert db.loads == ["s1"]


def test_an_append_reads_nothing_and_the_first_read_loads_the_history() -> None:
    db = Database({"s1": [msg(i) for i in range(3)]})
    memory = db.memory(cap=10)
    memory.add(msg(3))
    assert db.loads == []
    assert ids(memory.recent("s1", 10)) == ["m0000", "m0001", "m0002", "m0003"]
    assert db.loads == ["s1"]


def test_sync_loads_again_only_when_the_session_changed() -> None:
    db = Database({"s1": [msg(0)], "s2": [msg(0, "s2")]})
    memory = db.memory(cap=10)
    memory.sync("s1")
    memory.sync("s1")
    db.commit(msg(1, "s2"))  # another session's change: nothing to load for s1
    memory.sync("s1")
    assert db.loads == ["s1"]
    db.commit(msg(1))  # another process's turn
    memory.sync("s1")
    assert ids(memory.recent("s1", 10)) == ["m0000", "m0001"]
    assert db.loads == ["s1", "s1"]


def test_a_forgotten_session_is_emptied_by_the_next_sync() -> None:
    db = Database({"s1": [msg(0), msg(1)]})
    memory = db.memory(cap=10)
    assert ids(memory.recent("s1", 10)) == ["m0000", "m0001"]
    db.history["s1"] = []
    db.marks["s1"] = 99
    memory.sync("s1")
    assert memory.recent("s1", 10) == []


def test_an_appended_turn_already_committed_is_not_doubled() -> None:
    db = Database({"s1": [msg(0), msg(1)]})
    memory = db.memory(cap=10)
    memory.add(msg(1), sent(5))
    assert ids(memory.recent("s1", 10)) == ["m0000", "m0001"]
    assert memory.pending("s1") == []  # the load showed it committed


def test_pending_turns_stay_until_the_writer_commits_past_them() -> None:
    db = Database()
    memory = db.memory(cap=10, committed=(5, 0))
    memory.add(msg(0), sent(4))     # settled, yet not in the database: rejected
    memory.add(msg(1), sent(6))     # not yet
    memory.add(msg(2), sent(None))  # still in a batched() buffer
    assert ids(memory.recent("s1", 10)) == ["m0001", "m0002"]
    db.commit(msg(9, "s1"))
    memory.sync("s1")
    assert ids(memory.recent("s1", 10)) == ["m0001", "m0002", "m0009"]
    assert [p.message.id for p in memory.pending("s1")] == ["m0001", "m0002"]


def test_rejected_turns_are_dropped() -> None:
    memory = Database().memory(cap=10)
    memory.add(msg(0))
    memory.add(msg(1))
    memory.drop({"m0000"})
    assert ids(memory.recent("s1", 10)) == ["m0001"]


def test_the_newer_of_two_racing_loads_is_kept() -> None:
    db = Database({"s1": [msg(0)]})
    memory = db.memory(cap=10)
    memory.recent("s1", 10)
    newer = db.load("s1", 10)
    db.commit(msg(1))
    memory.sync("s1")
    later = memory.recent("s1", 10)
    db.history["s1"] = []  # a stale load arriving last must not win
    db.load = lambda session_id, limit: newer  # type: ignore[method-assign]
    memory._load = db.load
    db.marks["s1"] = 100
    memory.sync("s1")
    assert ids(memory.recent("s1", 10)) == ids(later) == ["m0000", "m0001"]


def test_an_older_import_lands_in_order_and_falls_off_when_full() -> None:
    memory = Database().memory(cap=3)
    for i in (10, 20, 30):
        memory.add(msg(i))
    memory.add(msg(15))
    assert ids(memory.recent("s1", 10)) == ["m0015", "m0020", "m0030"]
    memory.add(msg(1))  # older than all three kept: not among the last three
    assert ids(memory.recent("s1", 10)) == ["m0015", "m0020", "m0030"]


def test_least_recently_used_session_is_evicted_and_loaded_again() -> None:
    db = Database({s: [msg(0, s)] for s in ("a", "b", "c")})
    memory = db.memory(cap=5, max_sessions=2)
    memory.recent("a", 5)
    memory.recent("b", 5)
    memory.recent("a", 5)  # a is now the most recently used
    memory.recent("c", 5)  # evicts b
    assert "a" in memory
    assert "c" in memory
    assert "b" not in memory
    assert len(memory) == 2
    memory.recent("b", 5)
    assert db.loads == ["a", "b", "c", "b"]
    assert "a" not in memory


def test_forget_drops_a_session() -> None:
    db = Database()
    memory = db.memory(cap=5, max_sessions=2)
    memory.add(msg(0))
    memory.forget("s1")
    assert "s1" not in memory
    assert memory.recent("s1", 5) == []
    assert db.loads == ["s1"]


@pytest.mark.parametrize(("cap", "max_sessions"), [(0, 1), (1, 0), (-5, 10)])
def test_bounds_below_one_are_refused(cap: int, max_sessions: int) -> None:
    with pytest.raises(ValueError, match="must be at least 1"):
        Database().memory(cap=cap, max_sessions=max_sessions)


def test_concurrent_appends_lose_nothing_and_double_nothing() -> None:
    memory = Database().memory(cap=1000, max_sessions=2)
    sessions = ("a", "b", "c")

    def append(worker: int) -> None:
        for i in range(200):
            memory.add(msg(worker * 1000 + i, sessions[i % 3], minutes=i))
            memory.recent(sessions[(i + 1) % 3], 5)
            memory.sync(sessions[i % 3])

    threads = [threading.Thread(target=append, args=(w,)) for w in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    # With two sessions kept, one of the three was evicted; the others hold every turn
    # added since, each once.
    for session in sessions:
        if session in memory:
            turns = ids(memory.recent(session, 1000))
            assert len(turns) == len(set(turns))
    assert len(memory) == 2


# -- inside the client: a real database and writer ----------------------------------------

@pytest.mark.redis
def test_history_survives_a_client_restart(config: Config, writer: WriterThread) -> None:
    with MemoryClient(config=config) as first:
        sent = [first.append("s1", "user", f"turn {i}") for i in range(60)]
        first.flush()
    with MemoryClient(config=config) as restarted:
        recent = restarted.working_memory.recent("s1", 100)
    assert ids(recent) == sent[-50:]  # working_memory_cap = 50


@pytest.mark.redis
def test_append_first_after_restart_still_sees_the_history(
    config: Config, writer: WriterThread
) -> None:
    with MemoryClient(config=config) as first:
        sent = [first.append("s1", "user", f"turn {i}") for i in range(5)]
        first.flush()
    with MemoryClient(config=config) as restarted:
        sent.append(restarted.append("s1", "user", "after the restart"))
        items = restarted.get_context("s1")
    assert [item.id for item in items] == sent


@pytest.mark.redis
def test_own_appends_are_visible_before_any_writer_commits(config: Config) -> None:
    # No writer at all: the database does not even exist yet.
    with MemoryClient(config=config) as client:
        sent = [client.append("s1", "user", f"turn {i}") for i in range(3)]
        assert [item.id for item in client.get_context("s1")] == sent
        assert [m.id for m in client.history("s1")] == sent
        assert client.history("other") == []


@pytest.mark.redis
def test_client_honours_the_memory_settings(config: Config, writer: WriterThread) -> None:
    config = config.replace(memory=MemoryConfig(working_memory_cap=3, max_sessions=1))
    with MemoryClient(config=config) as client:
        for i in range(5):
            client.append("a", "user", f"turn {i}")
        client.append("b", "user", "other session")
        assert "a" not in client.working_memory
        assert len(client.working_memory.recent("b", 10)) == 1
        client.flush()
        assert [m.content for m in client.working_memory.recent("a", 10)] == [
            "turn 2", "turn 3", "turn 4"]


def test_summaries_replace_consolidated_turns_beyond_the_recency_window(
    config: Config, writer: object
) -> None:
    start = datetime(2026, 1, 1, tzinfo=UTC)
    with MemoryClient(config=config) as client:
        ids = [client.append("long", "user", f"old turn number {i} about the Lisbon trip",
                             created_at=start + timedelta(minutes=i)) for i in range(30)]
        client.flush()
        client._send(EventType.SESSION_CONSOLIDATED, {
            "summary_id": "sum-1", "content": "Summary: 25 turns about the Lisbon trip.",
            "source_ids": ids[:25], "importance": 0.7, "facts": [],
        }, session_id="long", created_at=(start + timedelta(days=2)).isoformat())
        client.flush()
    with MemoryClient(config=config) as fresh:  # a restarted agent hydrates from the database
        seen = [m.id for m in fresh.working_memory.recent("long", 50)]
        recency = [i.id for i in fresh.get_context("long") if "recency" in i.branches]
    # The newest 10 turns (the recency window) verbatim, even those consolidated;
    # before them, the summary stands for the consolidated stretch.
    assert seen == ["sum-1", *ids[20:]]
    assert recency == ids[20:]
