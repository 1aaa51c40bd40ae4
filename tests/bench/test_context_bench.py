"""bench/context.py runs end to end on a small session and prints every figure it promises."""

from __future__ import annotations

import os
import re
import subprocess
import sys

import pytest

from tests.conftest import MODEL_DIR, ROOT

pytestmark = [pytest.mark.model, pytest.mark.slow]


def test_the_context_bench_prints_latencies_against_its_baselines() -> None:
    done = subprocess.run(
        [sys.executable, "bench/context.py", "--sizes", "300", "--calls", "10",
         "--naive-calls", "3", "--base", "40"],
        cwd=ROOT, env={**os.environ, "MEMQ_EMBED_MODEL_DIR": str(MODEL_DIR)},
        capture_output=True, text=True, timeout=300, check=False)
    assert done.returncode == 0, done.stderr[-2000:]
    out = done.stdout
    assert "300 embedded messages (built in" in out
    for line in ("get_context", "brute scan only", "naive"):
        assert re.search(rf"{line} +p50 +[\d.]+ ms +p95 +[\d.]+ ms", out), line
    assert re.search(r"naive / get_context: p50 x[\d.]+, p95 x[\d.]+", out)
    assert "same ids as the brute scan: yes" in out
