"""bench/forget.py runs end to end at a tiny size and prints every figure it promises."""

from __future__ import annotations

import re
import subprocess
import sys

import pytest

from tests.conftest import ROOT

pytestmark = pytest.mark.redis


def test_the_forget_bench_prints_both_timings_and_leaves_no_marker() -> None:
    done = subprocess.run(
        [sys.executable, "bench/forget.py", "--messages", "60", "--sessions", "3",
         "--others", "1", "--statements", "3"],
        cwd=ROOT, capture_output=True, text=True, timeout=300, check=False)
    assert done.returncode == 0, done.stderr[-2000:]
    assert "database: 2 users x 60 messages (3 sessions each" in done.stdout
    assert "the 3 statements the writer spent most time in:" in done.stdout
    statements = re.findall(r"^ +[\d.]+ ms +\d+x  (.+)$", done.stdout, re.M)
    assert len(statements) == 3, done.stdout  # which three: the machine's timing decides
    base = re.search(r"baseline DELETE\s+([\d.]+) ms\s+\(marker left in file\+WAL: ([\d,]+)\)",
                     done.stdout)
    assert base is not None, done.stdout
    assert int(base.group(2).replace(",", "")) > 0  # a plain DELETE leaves the text behind
    for name in ("memq committed", "memq every trace"):
        line = re.search(rf"{name}\s+([\d.]+) ms\s+\(ratio ([\d.]+)", done.stdout)
        assert line is not None, done.stdout
        assert float(line.group(1)) > 0
    assert re.search(r"in steps; marker left in file\+WAL: 0\)", done.stdout)
    assert "erased: 60 messages" in done.stdout
    cpu = re.search(r"CPU time: baseline (\d+) ms, memq until every trace (\d+) ms", done.stdout)
    assert cpu is not None, done.stdout
    assert int(cpu.group(2)) > 0
    session = re.search(r"one session \((\d+) messages\) of a user who stays: baseline DELETE "
                        r"[\d.]+ ms .* every trace ([\d.]+) ms", done.stdout)
    assert session is not None, done.stdout
    assert session.group(1) == "20"
    assert float(session.group(2)) > 0


def test_the_unindex_bench_prints_both_ways_for_each_size() -> None:
    done = subprocess.run(
        [sys.executable, "bench/unindex.py", "--sizes", "150,300", "--forget", "3"],
        cwd=ROOT, capture_output=True, text=True, timeout=300, check=False)
    assert done.returncode == 0, done.stderr[-2000:]
    for size in ("150", "300"):
        assert re.search(rf"^ +{size} +[\d.]+ / +[\d.]+ +[\d.]+ / +[\d.]+  x[\d.]+$",
                         done.stdout, re.M), done.stdout


def test_the_forget_stall_bench_prints_both_lags_and_leaves_no_marker() -> None:
    done = subprocess.run(
        [sys.executable, "bench/forget_stall.py", "--messages", "200", "--seconds", "0.5"],
        cwd=ROOT, capture_output=True, text=True, timeout=300, check=False)
    assert done.returncode == 0, done.stderr[-2000:]
    out = done.stdout
    for phase in ("before the forget", "during the forget"):
        line = re.search(rf"{phase} +p50 +([\d.]+) ms +p99 +([\d.]+) ms", out)
        assert line is not None, out
        assert float(line.group(2)) >= float(line.group(1)) > 0
    assert re.search(r"every trace gone after [\d.]+ s \(200 messages", out), out
    assert "marker left: 0 in the database and its WAL, 0 Redis keys" in out
    assert re.search(r"p99 during / before: x[\d.]+ \(goal <= x5", out), out
