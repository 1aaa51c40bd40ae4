"""bench/embed.py runs at a tiny size and prints every figure it promises."""

from __future__ import annotations

import os
import re
import subprocess
import sys

import pytest

from tests.conftest import MODEL_DIR, ROOT

pytestmark = [pytest.mark.redis, pytest.mark.model, pytest.mark.slow]

NUMBER = r"([\d.]+)"


def test_the_embed_bench_prints_raw_one_worker_and_the_model_share() -> None:
    """One worker: a run with more is the same pipeline with more processes, each loading
    the model, and the suite shares two cores."""
    env = {**os.environ, "MEMQ_EMBED_MODEL_DIR": str(MODEL_DIR)}
    done = subprocess.run(
        [sys.executable, "bench/embed.py", "--mix", "agent", "--messages", "12",
         "--workers", "1"],
        cwd=ROOT, env=env, capture_output=True, text=True, timeout=600, check=False)
    assert done.returncode == 0, done.stderr[-2000:]
    out = done.stdout
    assert re.search(r"--mix agent: 12 messages \(.*tool outputs.*\); \d+ distinct", out)
    assert re.search(rf"\| raw fastembed, arrival order \| {NUMBER} \| 1.00 \|", out)
    row = re.search(rf"\| pipeline, 1 worker \| {NUMBER} \| {NUMBER} \| {NUMBER} \| {NUMBER} "
                    rf"\| {NUMBER} \| {NUMBER} \|", out)
    assert row is not None, out
    assert all(float(v) > 0 for v in row.groups())
    assert "workers / 1 worker" not in out
    share = re.search(rf"worker time in the model: {NUMBER}%; counting tokens to plan batches "
                      rf"{NUMBER}%; elsewhere \(RQ, Redis, events\) (-?[\d.]+)%", out)
    assert share is not None, out
    assert 0 < float(share.group(1)) <= 100
    assert re.search(rf"pipeline, 1 worker / raw fastembed: {NUMBER}x messages/s", out)


def test_the_embed_bench_refuses_a_zero_size() -> None:
    done = subprocess.run([sys.executable, "bench/embed.py", "--messages", "0"], cwd=ROOT,
                          capture_output=True, text=True, timeout=60, check=False)
    assert done.returncode == 2
    assert "--messages and --workers must be at least 1" in done.stderr
