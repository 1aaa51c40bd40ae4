"""bench/aio.py runs end to end at a tiny size and prints every figure it promises."""

from __future__ import annotations

import re
import subprocess
import sys

import pytest

from tests.conftest import ROOT

pytestmark = pytest.mark.redis


def test_the_aio_bench_prints_both_clients_and_their_ratios() -> None:
    done = subprocess.run(
        [sys.executable, "bench/aio.py", "--agents", "3", "--turns", "10", "--repeats", "1"],
        cwd=ROOT, capture_output=True, text=True, timeout=300, check=False)
    assert done.returncode == 0, done.stderr[-2000:]
    assert "3 agents x 10 turns" in done.stdout
    for name in ("appended/s", "committed/s", "reads/s", "read p50 ms", "read p95 ms",
                 "rounds/s"):
        row = re.search(rf"^{re.escape(name)}\s+([\d.]+)\s+([\d.]+)\s+([\d.]+)x$",
                        done.stdout, re.MULTILINE)
        assert row is not None, (name, done.stdout)
        assert all(float(value) > 0 for value in row.groups())
    hop = re.search(r"inline p50 ([\d.]+) ms, through a worker thread p50 ([\d.]+) ms",
                    done.stdout)
    assert hop is not None, done.stdout
