"""bench/consolidate.py runs on a small LoCoMo-shaped file: in process and whole pipeline."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from tests.bench.test_retrieval_bench import small_file
from tests.conftest import MODEL_DIR, ROOT

pytestmark = [pytest.mark.redis, pytest.mark.model, pytest.mark.slow]


def test_the_consolidation_bench_prints_rates_ratio_and_compression(tmp_path: Path) -> None:
    done = subprocess.run(
        [sys.executable, "bench/consolidate.py", "--data", str(small_file(tmp_path))],
        cwd=ROOT, env={**os.environ, "MEMQ_EMBED_MODEL_DIR": str(MODEL_DIR)},
        capture_output=True, text=True, timeout=300, check=False)
    assert done.returncode == 0, done.stderr[-2000:]
    out = done.stdout
    assert "1 conversations, 30 messages in 1 chunks" in out
    assert re.search(r"extractive summariser: +[\d.]+ messages/s .* = [\d.]+ x the baseline",
                     out)
    assert re.search(r"compression \(chars in / chars out\): [\d.]+ overall", out)
    assert re.search(r"whole pipeline .*: +[\d.]+ messages/s \(30 messages, 1 summaries", out)
