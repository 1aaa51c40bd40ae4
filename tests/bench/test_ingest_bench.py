"""bench/ingest.py runs end to end on a small backlog and prints every figure it promises."""

from __future__ import annotations

import re
import subprocess
import sys

import pytest

from tests.conftest import ROOT

pytestmark = [pytest.mark.redis, pytest.mark.slow]


def test_the_ingest_bench_prints_rounds_ratio_and_lag() -> None:
    done = subprocess.run(
        [sys.executable, "bench/ingest.py", "--messages", "2000", "--rounds", "2",
         "--rate", "200", "--seconds", "1"],
        cwd=ROOT, capture_output=True, text=True, timeout=300, check=False)
    assert done.returncode == 0, done.stderr[-2000:]
    rounds = re.findall(r"round \d: end to end ([\d,]+) messages/s committed, raw apsw "
                        r"\(batches 1000\) ([\d,]+) rows/s, ratio ([\d.]+)", done.stdout)
    assert len(rounds) == 2
    assert all(float(ratio) > 0 for _, _, ratio in rounds)
    assert re.search(r"ratio end to end / raw:\s+[\d.]+ \(median of 2\)", done.stdout)
    lag = re.search(r"commit lag at 200/s for 1s \((\d+) messages\): p50 ([\d.]+) ms, "
                    r"p99 ([\d.]+) ms", done.stdout)
    assert lag is not None
    assert 0 < int(lag.group(1)) <= 200
