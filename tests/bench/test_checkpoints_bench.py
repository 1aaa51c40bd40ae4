"""bench/checkpoints.py runs on a few batches and prints both ways and their ratios."""

from __future__ import annotations

import re
import subprocess
import sys

import pytest

from tests.conftest import ROOT

pytestmark = pytest.mark.slow


def test_the_checkpoints_bench_prints_both_ways_and_their_ratios() -> None:
    done = subprocess.run(
        [sys.executable, "bench/checkpoints.py", "--batches", "40", "--rounds", "2"],
        cwd=ROOT, capture_output=True, text=True, timeout=300, check=False)
    assert done.returncode == 0, done.stderr[-2000:]
    rows = re.findall(r"round (\d): (thread|in commit) +p50 +([\d.]+) +p99 +([\d.]+) +"
                      r"p99\.9 +([\d.]+) +slowest +([\d.]+); (\d+) over 25 ms", done.stdout)
    assert [(r, way) for r, way, *_ in rows] == [
        ("1", "thread"), ("1", "in commit"), ("2", "thread"), ("2", "in commit")]
    assert all(0 < float(p50) <= float(p99) <= float(slowest)
               for *_, p50, p99, _p999, slowest, _over in rows)
    assert re.search(r"thread / in commit, median of the rounds: p50 x[\d.]+, p99 x[\d.]+, "
                     r"slowest x[\d.]+", done.stdout)
