"""bench/changes.py runs end to end at a tiny size and prints every figure it promises."""

from __future__ import annotations

import re
import subprocess
import sys

import pytest

from tests.conftest import ROOT

pytestmark = [pytest.mark.redis, pytest.mark.slow]


def test_the_feed_bench_prints_latency_and_throughput_against_their_baselines() -> None:
    done = subprocess.run(
        [sys.executable, "bench/changes.py", "--seconds", "1", "--rate", "20",
         "--backlog", "600"],
        cwd=ROOT, capture_output=True, text=True, timeout=300, check=False)
    assert done.returncode == 0, done.stderr[-2000:]
    for follower in ("flush \\(baseline\\)", "in process", "over HTTP"):
        assert re.search(rf"{follower}\s+\d+ turns\s+p50\s+[\d.]+ ms\s+p99\s+[\d.]+ ms\s+"
                         r"\(x[\d.]+ / x[\d.]+ of flush\)", done.stdout), done.stdout
    for reader in ("writer commits \\(baseline\\)", "in process", "over HTTP"):
        assert re.search(rf"{reader}\s+[\d,]+ changes/s\s+\(x[\d.]+ of the writer\)",
                         done.stdout), done.stdout
