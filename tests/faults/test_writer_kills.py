"""The writer SIGKILLed at random points under a sustained load of appends, facts and
embeddings: afterwards every acknowledged event is committed exactly once, the projections
equal a rebuild from the log, and SQLite's integrity check passes."""

from __future__ import annotations

import random
import time
from pathlib import Path

import pytest
import redis

from memq import names
from memq.config import Config
from tests.faults import figures
from tests.faults.load import Load, verify
from tests.faults.procs import committed, start_writer, wait_until

pytestmark = [pytest.mark.faults, pytest.mark.redis, pytest.mark.slow]

SEED = 20261130
"""The kill points and the load are drawn from this seed: a failure can be replayed."""

KILLS = 8


def test_writer_killed_at_random_points_loses_and_duplicates_nothing(
    config: Config, tmp_path: Path
) -> None:
    rng = random.Random(SEED)
    broker = redis.Redis.from_url(config.redis_url)
    load = Load(config, seed=SEED)
    load.start()
    survived = in_hand = 0
    logs = []
    for kill in range(KILLS):
        before = committed(broker)
        logs.append(tmp_path / f"writer-{kill}.log")
        writer = start_writer(config, logs[-1])
        # Let this writer commit at least one batch, then kill it somewhere later: in a
        # transaction, between commit and acknowledgement, in a follow-up, or idle.
        wait_until(lambda w=writer, b=before: committed(broker) != b or not w.alive,
                   f"writer {kill} to commit a batch", timeout=60)
        time.sleep(rng.uniform(0.0, 0.3))
        if kill % 2:  # every other kill waits for a batch to be in hand, then strikes
            wait_until(lambda: _pending(broker) > 0, "a batch in hand", timeout=30)
        survived += writer.kill()
        # Entries delivered to the dead writer and never acknowledged: it died mid-batch.
        in_hand += _pending(broker) > 0
    sent = load.finish()
    final = start_writer(config, tmp_path / "writer-final.log")
    try:
        # Sent last, so once it is committed everything before it is too.
        last = load.client.append("after", "user", "the last one")
        load.client.flush(180)
        sent.appends[last] = "the last one"
    finally:
        assert final.terminate() == 0, final.output()[-2000:]
        load.client.close()
    verdict = verify(config, sent)

    figures.add("kills", survived)
    figures.add("kills_in_hand", in_hand)
    figures.add("appends", len(sent.appends))
    figures.add("events", sent.events)
    figures.add("lost", len(verdict.lost))
    figures.add("duplicated", verdict.duplicated)
    assert survived == KILLS, "a writer died before it was killed: see its log"
    assert in_hand >= KILLS // 3, "the targeted kills should land with a batch in hand"
    assert sent.broker_errors == []
    assert len(sent.appends) > 2000
    assert sent.fact_sets > 0
    assert sent.fact_deletes > 0
    assert verdict.lost == [], f"{len(verdict.lost)} acknowledged appends lost"
    assert verdict.problems == []
    for log in logs:
        assert "Traceback" not in log.read_text(errors="replace"), log


def _pending(broker: redis.Redis) -> int:
    return sum(int(broker.xpending(stream, names.WRITER_GROUP)["pending"])
               for stream in names.INBOX_STREAMS)
