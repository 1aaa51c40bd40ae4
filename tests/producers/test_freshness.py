"""Many agent processes on one session: each read sees every turn committed before it.

The reproduction of the stale read: client R reads session s; client W, in another real
process, appends and flushes; R's next get_context and history must show W's turns, and
R's own turns not yet committed must stay visible.
"""

from __future__ import annotations

import dataclasses
import os
import subprocess
import sys
from datetime import UTC, datetime, timedelta
from typing import Any

import orjson
import pytest

from memq import MemoryClient
from memq.config import Config
from memq.events import EventType
from memq.testing import WriterThread, wait_committed
from tests.conftest import MODEL_DIR, ROOT

pytestmark = pytest.mark.redis

WRITER_SCRIPT = """
import sys, orjson
from memq import MemoryClient
session, count, prefix = sys.argv[1], int(sys.argv[2]), sys.argv[3]
with MemoryClient.from_env() as w:
    ids = [w.append(session, "assistant", f"{prefix} {i}") for i in range(count)]
    w.flush(timeout=30)
print(orjson.dumps(ids).decode())
"""


def append_elsewhere(config: Config, session: str, count: int, prefix: str) -> list[str]:
    """Client W: another process appends ``count`` turns and flushes; their ids."""
    env = {**os.environ, "PYTHONPATH": str(ROOT), "MEMQ_REDIS_URL": config.redis_url,
           "MEMQ_DB": config.db_path, "MEMQ_EMBED_MODEL_DIR": str(MODEL_DIR)}
    done = subprocess.run([sys.executable, "-c", WRITER_SCRIPT, session, str(count), prefix],
                          env=env, cwd=ROOT, capture_output=True, timeout=120, check=False)
    assert done.returncode == 0, done.stderr.decode()
    ids: list[str] = orjson.loads(done.stdout)
    return ids


def context_ids(client: MemoryClient, session: str) -> list[str]:
    return [item.id for item in client.get_context(session) if "recency" in item.branches]


@pytest.mark.remote_too
def test_a_turn_another_process_committed_is_in_the_next_read(
    config: Config, client: MemoryClient
) -> None:
    with client as reader:
        mine = [reader.append("s", "user", "hello from R")]
        reader.flush()
        assert context_ids(reader, "s") == mine  # R has read the session: its copy is loaded
        theirs = append_elsewhere(config, "s", 3, "from W")
        assert context_ids(reader, "s") == mine + theirs
        assert [m.id for m in reader.history("s")] == mine + theirs


@pytest.mark.remote_too
def test_own_unsent_turns_stay_visible_beside_other_processes_turns(
    config: Config, writer: WriterThread, client: MemoryClient
) -> None:
    with client as reader:
        reader.get_context("s")
        theirs = append_elsewhere(config, "s", 2, "from W")
        writer.stop()  # nothing R sends from now on is committed
        mine = reader.append("s", "user", "R's turn, not committed")
        assert context_ids(reader, "s") == [*theirs, mine]
        assert [m.id for m in reader.history("s")] == [*theirs, mine]


def test_a_session_nobody_changed_is_not_loaded_again(
    make_client: Any, config: Config, writer: WriterThread
) -> None:
    with make_client(config=config) as reader:
        reader.append("s", "user", "one")
        reader.flush()
        reader.get_context("s")
        loads = []
        load = reader.working_memory._load
        reader.working_memory._load = lambda s, n: loads.append(s) or load(s, n)  # type: ignore[method-assign, func-returns-value]
        append_elsewhere(config, "other", 2, "elsewhere")
        for _ in range(3):
            reader.get_context("s")
        assert loads == []
        append_elsewhere(config, "s", 1, "here")
        reader.get_context("s")
        reader.get_context("s")
        assert loads == ["s"]


def test_a_consolidation_committed_elsewhere_replaces_the_turns_it_summarises(
    make_client: Any, config: Config, writer: WriterThread
) -> None:
    start = datetime(2026, 1, 1, tzinfo=UTC)
    with make_client(config=config) as reader, make_client(config=config) as other:
        ids = [reader.append("long", "user", f"turn {i}", created_at=start + timedelta(minutes=i))
               for i in range(30)]
        reader.flush()
        assert len(reader.working_memory.recent("long", 50)) == 30
        other._send(EventType.SESSION_CONSOLIDATED, {
            "summary_id": "sum-1", "content": "Summary of the first 25 turns.",
            "source_ids": ids[:25], "importance": 0.7, "facts": [],
        }, session_id="long", created_at=(start + timedelta(days=2)).isoformat())
        other.flush()
        reader.get_context("long")
        assert [m.id for m in reader.working_memory.recent("long", 50)] == ["sum-1", *ids[20:]]


def test_a_turn_the_writer_rejected_leaves_working_memory(
    make_client: Any, config: Config, writer: WriterThread
) -> None:
    with make_client(config=config) as client:
        kept = client.append("s", "user", "fine")
        client.flush()
        # The writer refuses what the client accepted (a smaller limit on its side).
        writer.stop()
        ghost = client.append("s", "user", "x" * 2000)
        small = dataclasses.replace(config.limits, max_payload_bytes=1500)
        strict = WriterThread(config.replace(limits=small))
        strict.start()
        try:
            wait_committed(client.redis)
            other = append_elsewhere(config, "s", 1, "later")
            assert ghost not in context_ids(client, "s")
            assert context_ids(client, "s") == [kept, *other]
        finally:
            strict.stop()
