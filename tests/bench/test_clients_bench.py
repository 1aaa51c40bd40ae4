"""bench/clients.py runs at a tiny size and prints both ways and their ratio."""

from __future__ import annotations

import re
import subprocess
import sys

from tests.conftest import ROOT


def test_the_clients_bench_prints_both_ways_and_the_ratio() -> None:
    done = subprocess.run([sys.executable, "bench/clients.py", "--clients", "3"], cwd=ROOT,
                          capture_output=True, text=True, timeout=120, check=False)
    assert done.returncode == 0, done.stderr[-2000:]
    for name in ("shared context", r"a context each \(before\)"):
        row = re.search(rf"^{name} +wall +([\d.]+) ms  CPU +([\d.]+) ms per client$",
                        done.stdout, re.MULTILINE)
        assert row is not None, (name, done.stdout)
        assert float(row.group(1)) > 0
    assert re.search(r"a context each / shared: \d+x the wall time per client", done.stdout)


def test_the_clients_bench_refuses_zero_clients() -> None:
    done = subprocess.run([sys.executable, "bench/clients.py", "--clients", "0"], cwd=ROOT,
                          capture_output=True, text=True, timeout=60, check=False)
    assert done.returncode == 2
    assert "--clients must be at least 1" in done.stderr
