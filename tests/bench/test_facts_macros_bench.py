"""bench/facts_macros.py runs on a small workload and prints each figure against its baseline."""

from __future__ import annotations

import re
import subprocess
import sys

import pytest

from tests.conftest import ROOT

pytestmark = pytest.mark.slow


def test_the_facts_and_macros_bench_prints_rates_and_read_times() -> None:
    done = subprocess.run(
        [sys.executable, "bench/facts_macros.py", "--facts", "50", "--events", "300",
         "--rounds", "1"],
        cwd=ROOT, capture_output=True, text=True, timeout=300, check=False)
    assert done.returncode == 0, done.stderr[-2000:]
    out = done.stdout
    for name in ("message.appended (baseline)", "fact.set", "macro.observed",
                 "macro.observed, users' sessions"):
        assert re.search(rf"{re.escape(name)} +[\d,]+ events/s +x[\d.]+ of baseline", out), name
    for name in ("list_facts (baseline)", "fact_history(one key)", "relevant_facts(query, 5)"):
        assert re.search(rf"{re.escape(name)} +[\d.]+ ms +x[\d.]+", out), name
    assert re.search(r"relearning the macros from 300 recorded calls .*: [\d.]+ s, \d+ µs a "
                     r"call, x[\d.]+ of applying them", out), out
