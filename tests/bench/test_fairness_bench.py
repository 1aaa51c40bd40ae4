"""bench/fairness.py runs end to end at a tiny size and prints every figure it promises."""

from __future__ import annotations

import re
import subprocess
import sys

import pytest

from tests.conftest import ROOT

pytestmark = [pytest.mark.redis, pytest.mark.slow]


def test_the_fairness_bench_prints_each_phase_and_the_ratio() -> None:
    done = subprocess.run(
        [sys.executable, "bench/fairness.py", "--seconds", "0.5", "--rate", "20",
         "--flooders", "1", "--flush-timeout", "3", "--bulk", "100"],
        cwd=ROOT, capture_output=True, text=True, timeout=300, check=False)
    assert done.returncode == 0, done.stderr[-2000:]
    for phase in ("alone", "A refused at the door", "A under its budget",
                  "A paced at its budget", "A without a budget"):
        assert re.search(rf"{phase}\s+B p50\s+[\d.]+ ms\s+p99\s+[\d.]+ ms", done.stdout), \
            done.stdout
    assert re.search(r"under its budget / alone: x[\d.]+ \(goal <= x2\); with A refused at "
                     r"the door: x[\d.]+; with A sending its budget evenly: x[\d.]+",
                     done.stdout), done.stdout
    paced = re.search(r"A paced at its budget .* A sent ([\d,]+) turns/s", done.stdout)
    assert paced is not None, done.stdout
    assert int(paced.group(1).replace(",", "")) > 0, done.stdout  # A did send
    assert re.search(r"one key alone in bulk \(100 turns in calls of 100, a third tool "
                     r"outputs\): [\d,]+ turns/s committed; beside a key appending one turn "
                     r"at a time, up to 200 a second: [\d,]+", done.stdout), done.stdout


@pytest.mark.parametrize(("argument", "message"), [
    (["--rate", "0"], "argument --rate: a rate is from 0.1 to 10000, got 0"),
    (["--bulk", "-3"], "argument --bulk: a count of turns is from 0 to 10000000, got -3"),
    (["--flooders", "many"], "argument --flooders: not a count of processes: 'many'"),
])
def test_a_bad_argument_is_a_usage_error_not_a_traceback(argument: list[str],
                                                          message: str) -> None:
    done = subprocess.run([sys.executable, "bench/fairness.py", *argument], cwd=ROOT,
                          capture_output=True, text=True, timeout=60, check=False)
    assert done.returncode == 2
    assert message in done.stderr
    assert "Traceback" not in done.stderr
