"""A consolidate worker SIGKILLed in the middle of a job: after a restart the work is done,
and done exactly once in the projections. (An embed worker killed mid-job is
tests/workers/test_embed.py's.)

They use only the public surface (``memq worker``, ``memq consolidate --now``, the client,
the documented columns), and skip themselves, saying why, while the embedding pipeline
(issue 4) or consolidation (issue 6) is not in the build.
"""

from __future__ import annotations

import json
import subprocess
import sys
import time
from collections import Counter
from datetime import UTC, datetime, timedelta
from pathlib import Path

import apsw
import pytest
import redis
from rq.registry import StartedJobRegistry

from memq import MemoryClient, names
from memq.config import Config
from memq.store import rebuild
from memq.testing import WriterThread
from tests.conftest import ROOT
from tests.faults import figures
from tests.faults.procs import Proc, env, wait_until

pytestmark = [pytest.mark.faults, pytest.mark.redis, pytest.mark.model, pytest.mark.slow]


def db(config: Config) -> apsw.Connection:
    return apsw.Connection(config.db_path, flags=apsw.SQLITE_OPEN_READONLY)


def kill_mid_job(config: Config, kind: str, queue: str, log: Path) -> None:
    """Start ``memq worker KIND``, SIGKILL it while it runs a job."""
    broker = redis.Redis.from_url(config.redis_url)
    started = StartedJobRegistry(queue, connection=broker)
    doomed = Proc(log, "worker", kind, "--name", f"doomed-{kind}", "--redis-url",
                  config.redis_url)
    try:
        wait_until(lambda: started.count > 0 or not doomed.alive,
                   f"the {kind} worker to start a job", timeout=120)
    finally:
        killed = doomed.kill()
    assert killed, doomed.output()[-2000:]
    figures.add("worker_kills")


def test_a_consolidate_worker_killed_mid_job_consolidates_everything_once(
    config: Config, tmp_path: Path
) -> None:
    writer = WriterThread(config)
    writer.start()
    worker = None
    long_ago = datetime.now(UTC) - timedelta(days=3)
    try:
        with MemoryClient(config=config) as client, client.batched():
            ids = [client.append("old", "user" if i % 2 else "assistant",
                                 f"On March {i % 28 + 1} Caroline went to the support group "
                                 f"with Melanie and talked about painting number {i}.",
                                 created_at=long_ago + timedelta(minutes=i))
                   for i in range(120)]
        client.flush(60)
        _request_pass(config)
        kill_mid_job(config, "consolidate", names.QUEUE_CONSOLIDATE, tmp_path / "doomed.log")
        worker = Proc(tmp_path / "worker.log", "worker", "consolidate", "--redis-url",
                      config.redis_url)
        deadline = time.monotonic() + 120
        while _unconsolidated(config, ids) and time.monotonic() < deadline:
            _request_pass(config)  # a later pass selects the killed job's chunk again
            time.sleep(2)
    finally:
        if worker is not None:
            worker.terminate()
        writer.stop()
    assert _unconsolidated(config, ids) == [], "some messages were never consolidated"
    sources = _applied_summary_sources(config)
    assert sorted(sources) == sorted(ids)  # every original in a summary...
    assert set(sources.values()) == {1}  # ...in exactly one
    assert rebuild.check(config.db_path) == []


def _request_pass(config: Config) -> None:
    done = subprocess.run([sys.executable, "-m", "memq", "consolidate", "--now", "--db",
                           config.db_path, "--redis-url", config.redis_url],
                          cwd=ROOT, env=env(), capture_output=True, text=True, timeout=60,
                          check=False)
    assert done.returncode == 0, done.stderr


def _unconsolidated(config: Config, ids: list[str]) -> list[str]:
    conn = db(config)
    try:
        done = {row[0] for row in conn.execute(
            "SELECT id FROM messages WHERE consolidated_at IS NOT NULL")}
    finally:
        conn.close()
    return [mid for mid in ids if mid not in done]


def _applied_summary_sources(config: Config) -> Counter[str]:
    """How many summaries that made it into ``messages`` cite each source message."""
    conn = db(config)
    try:
        stored = {row[0] for row in conn.execute("SELECT id FROM messages")}
        counts: Counter[str] = Counter()
        for (payload,) in conn.execute(
                "SELECT payload FROM events WHERE type = 'session.consolidated'"):
            body = json.loads(payload)
            if body["summary_id"] in stored:
                counts.update(body["source_ids"])
    finally:
        conn.close()
    return counts
