"""bench/terminal.py runs at a tiny size and prints every figure it promises."""

from __future__ import annotations

import re
import subprocess
import sys

from tests.conftest import ROOT

FIGURE = r"([\d.]+)"


def test_the_terminal_bench_prints_both_workloads_and_ratios() -> None:
    done = subprocess.run(
        [sys.executable, "bench/terminal.py", "--rounds", "2", "--repeat", "1",
         "--agent-commands", "50"],
        cwd=ROOT, capture_output=True, text=True, timeout=300, check=False)
    assert done.returncode == 0, done.stderr[-2000:]
    assert re.search(r"corpus \d+ commands \(13 prefixes\), agent 50 commands", done.stdout)
    rounds = re.findall(r"^round \d \(us/command\): corpus new [\d.]+, uncached [\d.]+, "
                        r"previous [\d.]+; agent new", done.stdout, re.M)
    assert len(rounds) == 2, done.stdout
    for workload in ("corpus", "agent"):
        summary = re.search(
            rf"^{workload}: new {FIGURE}, uncached {FIGURE}, previous {FIGURE} us/command; "
            rf"median of 2: new / previous {FIGURE} \({FIGURE}-{FIGURE}\), "
            rf"uncached / previous {FIGURE} \({FIGURE}-{FIGURE}\)$", done.stdout, re.M)
        assert summary is not None, done.stdout
        assert all(float(figure) > 0 for figure in summary.groups())
