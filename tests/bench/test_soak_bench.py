"""bench/soak.py runs the whole stack on a tiny load and prints every curve it promises."""

from __future__ import annotations

import re
import subprocess
import sys

import pytest

from tests.conftest import ROOT

pytestmark = [pytest.mark.redis, pytest.mark.model, pytest.mark.slow]


def test_the_soak_bench_prints_start_peak_and_end_of_each_curve() -> None:
    done = subprocess.run(
        [sys.executable, "bench/soak.py", "--messages", "200", "--keep-inbox", "10",
         "--sample", "0.5", "--settle", "1"],
        cwd=ROOT, capture_output=True, text=True, timeout=300, check=False)
    assert done.returncode == 0, done.stderr[-2000:]
    out = done.stdout
    assert re.search(r"soak: 200 messages pushed and committed in [\d.]+ s", out)
    assert re.search(r"redis used_memory: start [\d.]+ MB \(baseline [\d.]+ MB\), peak [\d.]+ MB"
                     r" at \d+ s, end [\d.]+ MB \([\d.]+x baseline\)", out)
    assert re.search(r"database \(file \+ WAL\): start [\d.]+ MB, peak [\d.]+ MB, end", out)
    for process in ("writer", "worker embed", "redis", "litestream"):
        assert re.search(rf"rss {process} +start +[\d.]+ MB, peak +[\d.]+ MB, end", out), process
    assert re.search(r"timeline: committed \d+ s, embedded \d+ s", out)
    assert re.search(r"redis back to its baseline within 1 s of the drain: (yes|no)", out)
