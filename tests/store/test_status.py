"""What the status readers say of Redis' replicas, against a real master and replica."""

from __future__ import annotations

import time
from pathlib import Path

import pytest
import redis

from memq.store.read import status
from memq.testing import RedisServer

pytestmark = [pytest.mark.redis]


def test_without_a_replica_there_is_nothing_behind(tmp_path: Path) -> None:
    with RedisServer(tmp_path) as master:
        found = status.replication(redis.Redis.from_url(master.url))
    assert found == {"role": "master", "replicas": 0, "behind_bytes": 0, "lag_s": 0}


def test_a_replica_is_counted_and_caught_up(tmp_path: Path) -> None:
    for name in ("m", "r"):
        (tmp_path / name).mkdir()
    # No delay before the first sync (5 s by default, to gather replicas).
    with RedisServer(tmp_path / "m", options=("--repl-diskless-sync-delay", "0")) as master, \
            RedisServer(tmp_path / "r", replica_of=master.port):
        client = redis.Redis.from_url(master.url)
        client.set("k", "v" * 1000)
        deadline = time.monotonic() + 30
        found = status.replication(client)
        while (found["replicas"] == 0 or found["behind_bytes"]) and time.monotonic() < deadline:
            time.sleep(0.05)  # the replica's first sync, then its acknowledgement (1 s)
            found = status.replication(client)
    assert found["replicas"] == 1
    assert found["behind_bytes"] == 0
    assert found["lag_s"] <= 1
