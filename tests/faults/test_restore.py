"""The writer's disk lost under load: the writer and Litestream SIGKILLed, the database,
its WAL and shared memory deleted, `memq restore` from the replica, a new writer started.
Every acknowledged event is there exactly once: what the replica had not received yet is
applied again from the inbox, which the writer keeps for `[replication] keep_inbox_s`."""

from __future__ import annotations

import shutil
import signal
import subprocess
import time
from pathlib import Path

import apsw
import orjson
import pytest
import redis

from memq.config import Config, ReplicationConfig
from tests.conftest import ROOT, memq_command
from tests.faults import figures
from tests.faults.load import Load, verify
from tests.faults.procs import Proc, committed, env, start_writer, wait_until

pytestmark = [pytest.mark.faults, pytest.mark.redis, pytest.mark.slow]

SEED = 20261201


def test_losing_the_writers_disk_loses_no_acknowledged_event(
    config: Config, tmp_path: Path
) -> None:
    replica = tmp_path / "replica"
    data = tmp_path / "data"
    data.mkdir()
    config = config.replace(db_path=str(data / "memq.db"),
                            replication=ReplicationConfig(url=replica.as_uri(), keep_inbox_s=120))
    settings = tmp_path / "memq.toml"
    settings.write_text(f'[replication]\nurl = "{replica.as_uri()}"\nkeep_inbox_s = 120\n')
    broker = redis.Redis.from_url(config.redis_url)
    writer = start_writer(config, tmp_path / "writer.log", settings)
    wait_until(lambda: Path(config.db_path).exists() or not writer.alive, "the database")
    replicate = Proc(tmp_path / "replicate.log", "replicate", "--db", config.db_path,
                     config_file=settings)
    load = Load(config, seed=SEED)
    load.start()
    # Under load for a while, with something shipped to the replica.
    wait_until(lambda: len(load.sent.appends) > 3000, "3000 acknowledged appends")
    wait_until(lambda: any(replica.rglob("*.ltx")), "Litestream to ship something")
    # Litestream paused while the writer goes on: the replica is then surely behind the
    # writer when both die (left to timing, Litestream had sometimes just caught up).
    # The writer commits in SQLite first and moves the commit position in Redis after: the
    # batch in hand at the pause may be committed, shipped by Litestream just before it
    # stopped, and only then show in the position. The batch after it began its transaction
    # once Litestream was stopped: wait for that one, then for commits beyond it.
    pause_litestream(replicate, broker)
    paused_at = committed(broker)
    wait_until(lambda: committed(broker) > paused_at, "commits the replica has not got")
    at_kill = committed(broker)
    writer_was_alive, replicate_was_alive = writer.kill(), replicate.kill()
    assert writer_was_alive, writer.output()[-2000:]
    assert replicate_was_alive, replicate.output()[-2000:]
    wait_until(lambda: len(load.sent.appends) > 3500, "appends with no writer running")
    sent = load.finish()

    for suffix in ("", "-wal", "-shm"):
        Path(f"{config.db_path}{suffix}").unlink(missing_ok=True)
    shutil.rmtree(data / ".memq.db-litestream", ignore_errors=True)
    done = subprocess.run(memq_command("restore", "--db", config.db_path,
                                       "--config", str(settings)),
                          capture_output=True, text=True, cwd=ROOT, env=env(), timeout=120)
    assert done.returncode == 0, done.stderr
    assert [p.name for p in data.iterdir() if "partial" in p.name] == []
    behind = _behind(config.db_path, at_kill)

    final = start_writer(config, tmp_path / "writer-final.log", settings)
    try:
        last = load.client.append("after", "user", "the last one")
        load.client.flush(120)
        sent.appends[last] = "the last one"
    finally:
        assert final.terminate() == 0, final.output()[-2000:]
        load.client.close()
    verdict = verify(config, sent)
    caught_up = _caught_up(final.output())

    figures.add("restores")
    figures.add("restore_reapplied", caught_up)
    figures.add("appends", len(sent.appends))
    figures.add("events", sent.events)
    figures.add("lost", len(verdict.lost))
    figures.add("duplicated", verdict.duplicated)
    assert verdict.lost == [], f"{len(verdict.lost)} acknowledged appends lost"
    assert verdict.problems == []
    assert behind, "the replica should lag the killed writer (else nothing is tested)"
    assert caught_up > 0
    for log in (writer.log, final.log):
        assert "Traceback" not in log.read_text(errors="replace"), log


def _behind(db_path: str, at_kill: tuple[tuple[int, int], ...]) -> bool:
    """Did the restored database stand behind the killed writer in some stream?"""
    conn = apsw.Connection(db_path, flags=apsw.SQLITE_OPEN_READONLY)
    try:
        restored = sorted(conn.execute("SELECT ms, seq FROM inbox_positions"))
    finally:
        conn.close()
    return max(restored, default=(0, 0)) < max(at_kill)


def _caught_up(output: str) -> int:
    for line in output.splitlines():
        if "caught up with the inbox" in line:
            return int(orjson.loads(line).get("entries", 0))
    return 0


def pause_litestream(replicate: Proc, broker: redis.Redis) -> None:
    """SIGSTOP Litestream once the writer goes on committing without it. Stopped inside
    its checkpoint, it holds the database's write lock and the writer can commit nothing
    ("database is locked", once in a CI run): then let it go on a moment and try again.
    Two moves of the commit position are waited for: the first may be a batch committed in
    SQLite before the stop, whose position reached Redis only after it (which is how a
    CI run got past this and then waited in vain for any commit)."""
    for _ in range(10):
        replicate.popen.send_signal(signal.SIGSTOP)
        deadline = time.monotonic() + 8.0
        if _moves(broker, 2, deadline):
            return
        replicate.popen.send_signal(signal.SIGCONT)
        time.sleep(0.5)
    pytest.fail("the writer committed nothing whenever Litestream was paused")


def _moves(broker: redis.Redis, times: int, deadline: float) -> bool:
    """Whether the commit position moves ``times`` times before ``deadline``."""
    seen = committed(broker)
    while times and time.monotonic() < deadline:
        now = committed(broker)
        if now > seen:
            seen, times = now, times - 1
        else:
            time.sleep(0.05)
    return times == 0
