"""Start order does not matter: agents started before the writer, while it creates the
database, or while it migrates a large one, append and read without a single error.

The writer is a real ``memq writer`` process; the agents are clients in this process,
calling every kind of read and write in a loop from the moment they start. Before the
database is ready they read "nothing yet" (and their own turns); once it is, everything.
"""

from __future__ import annotations

import shutil
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import pytest
import redis

from memq import MemoryClient
from memq.config import Config
from memq.store import schema
from memq.store.connection import open_connection
from tests.faults.procs import start_writer, wait_until
from tests.producers.aio_adapter import SyncOverAsync

pytestmark = [pytest.mark.redis, pytest.mark.slow]

OLD_ROWS = 12_000
"""Turns in the older database: enough for its migration to take a second or two here, so
that every agent reads while it runs (more only costs the suite CPU)."""


@pytest.fixture(scope="module")
def old_database(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A database at migration 0006 (before the lexical index) holding OLD_ROWS turns."""
    path = tmp_path_factory.mktemp("old") / "memq.db"
    conn = open_connection(path)
    schema.migrate(conn, through="0006_embedding_backlog_index")
    # Built in SQL: through the writer this would take minutes. Tool outputs of ~600 bytes;
    # marked as failed embeddings so the writer does not queue 40,000 embed jobs at start.
    conn.execute("""
        BEGIN;
        WITH RECURSIVE n(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM n WHERE i < ?)
        INSERT INTO events (seq, event_id, type, version, session_id, created_at,
                            recorded_at, payload)
        SELECT i, 'old-event-' || i, 'message.appended', 1, 'old-' || (i % 100),
               printf('2025-01-01T00:00:00.%06dZ', i), '2025-01-01T00:00:00Z',
               json_object('message_id', 'old-' || i, 'role', 'tool', 'content', 'see row',
                           'importance', 0.3)
        FROM n;
        INSERT INTO messages (id, session_id, role, content, created_at, importance, seq,
                              embedding_error)
        SELECT 'old-' || seq, session_id, 'tool',
               'tool output ' || seq || ': ' || replace(hex(randomblob(300)), 'A', ' a'),
               created_at, 0.3, seq, 'built by the test'
        FROM events;
        COMMIT;""", (OLD_ROWS,))
    conn.close()
    return path


@dataclass
class Agent:
    """A client calling append and every read in a loop, on its own thread."""

    client: MemoryClient
    session: str
    query: str | None = None
    sent: list[str] = field(default_factory=list)
    errors: list[BaseException] = field(default_factory=list)
    rounds_not_ready: int = 0
    """Rounds made while reads still saw no database (missing, old, or being built)."""
    rounds_migrating: int = 0
    """Of those, rounds made while the writer's migration was under way (its WAL growing)."""
    stop: threading.Event = field(default_factory=threading.Event)
    thread: threading.Thread | None = None

    def start(self) -> None:
        self.thread = threading.Thread(target=self.run, daemon=True)
        self.thread.start()

    def finish(self) -> None:
        self.stop.set()
        if self.thread is not None:
            self.thread.join(30)

    def run(self) -> None:
        while not self.stop.is_set():
            try:
                self.round()
            except BaseException as exc:
                self.errors.append(exc)
                return

    def round(self) -> None:
        ready = self.client.readers.is_ready()
        wal = Path(f"{self.client.config.db_path}-wal")
        migrating = not ready and wal.exists() and wal.stat().st_size > 0
        self.sent.append(self.client.append(self.session, "user", f"turn {len(self.sent)}"))
        items = self.client.get_context(self.session, query=self.query)
        assert self.sent[-1] in [item.id for item in items]
        assert self.sent[-1] == self.client.history(self.session, 5)[-1].id
        self.client.facts()
        self.client.tasks()
        self.client.is_command_allowed("ls -la")
        self.client.suggest_next_tools("ls")
        self.client.history("old-7", 3)
        self.rounds_not_ready += not ready
        self.rounds_migrating += migrating
        time.sleep(0.01)


@pytest.fixture
def agents(config: Config) -> Iterator[list[Agent]]:
    made = [Agent(MemoryClient(config=config), "a1", query="what did the tool print?"),
            Agent(SyncOverAsync(config=config), "a2")]  # the async client, as an agent
    yield made
    for agent in made:
        agent.finish()
        agent.client.close()


def let_run(agents: list[Agent], rounds: int) -> None:
    """Until every agent made ``rounds`` more rounds (or failed)."""
    targets = [len(agent.sent) + rounds for agent in agents]
    wait_until(lambda: all(a.errors or len(a.sent) >= t for a, t in zip(agents, targets,
                                                                          strict=True)),
               f"{rounds} more rounds of every agent")


def writer_is_up(config: Config) -> bool:
    return redis.Redis.from_url(config.redis_url).get("memq:writer:heartbeat") is not None


@pytest.mark.parametrize("order", ["agents first", "writer first", "while the writer "
                                   "creates the database", "while the writer migrates it"])
def test_no_client_call_fails_whatever_the_start_order(
    order: str, config: Config, agents: list[Agent], old_database: Path, tmp_path: Path
) -> None:
    migrating = order.endswith("migrates it")
    if migrating:
        shutil.copy(old_database, config.db_path)
    if order == "agents first":
        for agent in agents:
            agent.start()
        let_run(agents, 5)
    writer = start_writer(config, tmp_path / "writer.log")
    if order == "writer first":
        wait_until(lambda: writer_is_up(config), "the writer")
    for agent in agents:
        if agent.thread is None:
            agent.start()
    try:
        wait_until(lambda: writer_is_up(config) or not writer.alive, "the writer", 120)
        let_run(agents, 3)
        for agent in agents:
            agent.finish()
        assert [agent.errors for agent in agents] == [[], []], writer.output()
        for agent in agents:
            agent.client.flush(timeout=60)
            stored = [m.id for m in agent.client.history(agent.session, 10_000)]
            assert stored == agent.sent
    finally:
        writer.terminate()
    # The orders happened as named: reads found no database yet, or one being migrated.
    if order != "writer first":
        assert all(agent.rounds_not_ready > 0 for agent in agents)
    if migrating:
        assert all(agent.rounds_migrating > 0 for agent in agents)
        with MemoryClient(config=config) as fresh:
            assert len(fresh.history("old-7", 10_000)) == OLD_ROWS // 100
