"""bench/serve.py runs end to end at a tiny size and prints every figure it promises."""

from __future__ import annotations

import re
import subprocess
import sys

import pytest

from tests.conftest import ROOT

pytestmark = [pytest.mark.redis, pytest.mark.model]


def test_the_serve_bench_prints_both_sides_and_their_ratios() -> None:
    done = subprocess.run(
        [sys.executable, "bench/serve.py", "--sessions", "6", "--turns", "6", "--threads", "2",
         "--contexts", "3", "--appends", "5", "--batches", "1", "--pairs", "3"],
        cwd=ROOT, capture_output=True, text=True, timeout=300, check=False)
    assert done.returncode == 0, done.stderr[-2000:]
    assert "database: 6 sessions x 6 turns (36 messages" in done.stdout
    for side in ("in-process", "remote"):
        found = re.search(rf"{side}\s+p50\s+([\d.]+) ms\s+p95\s+([\d.]+) ms", done.stdout)
        assert found is not None, done.stdout
        assert 0 < float(found.group(1)) <= float(found.group(2))
    assert re.search(r"remote / in-process: p50 x[\d.]+, p95 x[\d.]+ \(goal p95 <= x2\)",
                     done.stdout), done.stdout
    for label in ("one caller, in turn", "2 callers, side by side"):
        assert re.search(rf"{label}: agent token p50 [\d.]+ ms, p95 [\d.]+ ms; a key of 20 "
                         r"users p50 [\d.]+ ms, p95 [\d.]+ ms; key / agent token: p50 "
                         r"x[\d.]+, p95 x[\d.]+", done.stdout), done.stdout
    for label in ("append, one turn a call", "append_many, 100 turns a call"):
        rates = re.search(rf"{label}, 2 callers: in-process ([\d,]+)/s, remote ([\d,]+)/s",
                          done.stdout)
        assert rates is not None, done.stdout
        assert int(rates.group(2).replace(",", "")) > 0
    assert re.search(r"appends/s batched over HTTP: [\d,]+ \(goal >= 5,000\)", done.stdout)
