"""bench/durability.py runs on a few appends and prints both comparisons it promises."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import ROOT

pytestmark = [pytest.mark.redis, pytest.mark.slow]


def test_the_durability_bench_prints_both_ratios(tmp_path: Path) -> None:
    done = subprocess.run(
        [sys.executable, "bench/durability.py", "--appends", "20", "--batched", "100",
         "--rounds", "1", "--dir", str(tmp_path)],
        cwd=ROOT, capture_output=True, text=True, timeout=300, check=False)
    assert done.returncode == 0, done.stderr[-2000:]
    for label in ("fsync = always / fsync = everysec",
                  "wait_replicas = 1 / wait_replicas = 0"):
        found = re.search(rf"ratio {label}: one at a time ([\d.]+), batched ([\d.]+) "
                          r"\(median of 1\)", done.stdout)
        assert found is not None, done.stdout
        assert float(found[1]) > 0
        assert float(found[2]) > 0
    assert len(re.findall(r"one at a time +[\d,]+/s \(p50 [\d.]+ ms", done.stdout)) == 4
