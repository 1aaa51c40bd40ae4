"""bench/webhooks.py runs end to end at a tiny size and prints every figure it promises."""

from __future__ import annotations

import re
import subprocess
import sys

import pytest

from tests.conftest import ROOT

pytestmark = [pytest.mark.redis, pytest.mark.slow]


def test_the_webhooks_bench_prints_each_phase_against_no_webhook() -> None:
    done = subprocess.run([sys.executable, "bench/webhooks.py", "--seconds", "0.5", "--rate",
                           "20"], cwd=ROOT, capture_output=True, text=True, timeout=300,
                          check=False)
    assert done.returncode == 0, done.stderr[-2000:]
    for phase in ("no webhook", "a hanging receiver", "and a healthy one"):
        assert re.search(rf"{phase}\s+p50\s+[\d.]+ ms\s+p99\s+[\d.]+ ms\s+\(p99 x[\d.]+ of no "
                         r"webhook\)", done.stdout), done.stdout
    assert re.search(r"healthy receiver beside the hanging one: \d+ of 10 turns, send to "
                     r"arrival p50 [\d.]+ ms, p99 [\d.]+ ms", done.stdout), done.stdout
