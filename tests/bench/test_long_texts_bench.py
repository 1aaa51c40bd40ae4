"""bench/long_texts.py runs at a tiny size and prints the cost line and every row."""

from __future__ import annotations

import re
import subprocess
import sys

import pytest

from tests.conftest import ROOT

pytestmark = [pytest.mark.redis, pytest.mark.model, pytest.mark.slow]

PAIR = r"(\d\.\d\d|-) / (\d\.\d\d|-)"


def test_the_long_texts_bench_compares_head_chunks_and_words() -> None:
    done = subprocess.run(
        [sys.executable, "bench/long_texts.py", "--messages", "20", "--queries", "6"],
        cwd=ROOT, capture_output=True, text=True, timeout=600, check=False)
    assert done.returncode == 0, done.stderr[-2000:]
    assert "Warning" not in done.stderr  # a third no query fell in is "-", not nan
    out = done.stdout
    assert re.search(r"20 messages, \d+ tool outputs of 20-60 lines; 6 queries", out)
    cost = re.search(r"vectors per tool output: head 1, head\+tail [\d.]+, chunks ([\d.]+); "
                     r"model CPU to embed the stream: head [\d.]+ s, chunks [\d.]+ s "
                     r"\(([\d.]+)x\)", out)
    assert cost is not None, out
    assert float(cost.group(1)) > 1  # tool outputs are longer than one window
    for name in (r"head \(memq\)", "chunks", r"head\+tail", r"lexical \(memq\)"):
        row = re.search(rf"\| {name} \| {PAIR} \| {PAIR} \| {PAIR} \| {PAIR} \|", out)
        assert row is not None, (name, out)
        overall = [float(v) for v in row.groups()[:2]]  # every query counts here
        assert all(0 <= v <= 1 for v in overall)
        assert overall[0] <= overall[1]  # top 5 within top 10
