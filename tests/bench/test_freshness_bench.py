"""bench/freshness.py runs end to end at a tiny size and prints every figure it promises."""

from __future__ import annotations

import re
import subprocess
import sys

import pytest

from tests.conftest import ROOT

pytestmark = pytest.mark.redis


def test_the_freshness_bench_prints_the_check_and_its_ratio() -> None:
    done = subprocess.run(
        [sys.executable, "bench/freshness.py", "--sessions", "8", "--turns", "6",
         "--calls", "30"],
        cwd=ROOT, capture_output=True, text=True, timeout=300, check=False)
    assert done.returncode == 0, done.stderr[-2000:]
    assert "database: 8 sessions x 6 turns (48 messages" in done.stdout
    for name, calls in [("check alone", 30), ("get_context", 30), ("unchecked", 30),
                        ("reload", 3)]:
        line = rf"{name}\s+p50\s+([\d.]+) ms\s+p95\s+([\d.]+) ms\s+\({calls} calls\)"
        found = re.search(line, done.stdout)
        assert found is not None, done.stdout
        assert 0 < float(found.group(1)) <= float(found.group(2))
    ratio = re.search(r"added by the check at p50: -?[\d.]+ ms \(goal <= 0.2 ms\); "
                      r"get_context / unchecked p50 ratio ([\d.]+)", done.stdout)
    assert ratio is not None
    assert float(ratio.group(1)) > 0
