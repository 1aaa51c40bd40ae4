"""bench/ann.py on a small LoCoMo-shaped file: every figure it promises."""

from __future__ import annotations

import re
from pathlib import Path

import numpy as np
import pytest

from bench import ann
from memq.store.read import neighbourhoods
from tests.bench.test_retrieval_bench import small_file
from tests.conftest import MODEL_DIR

pytestmark = [pytest.mark.redis, pytest.mark.model]


def test_the_bench_prints_both_engines_for_turns_and_keys(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(neighbourhoods, "PROJECT_FROM", 100)  # as a large history's keys
    ann.main(["--data", str(small_file(tmp_path, conversations=2)), "--size", "300",
              "--calls", "3", "--ef", "16,64", "--cache", str(tmp_path / "cache"),
              "--model-dir", str(MODEL_DIR)])
    out = capsys.readouterr().out
    assert "HNSW: usearch, i8, connectivity 32, expansion_add 128; one BLAS thread" in out
    assert re.search(r"\n3\d\d turns in one user; 3 questions, 200 candidates each", out)
    assert re.search(r"memq's reader loaded them \(vectors and keys\) in [\d.]+ s", out)
    # memq's search of the turns is exact: its candidates hold the whole exact best 50.
    assert re.search(r"turns memq +holds 1\.0000 \(lowest 1\.00\) +p50 +[\d.]+ ms", out)
    assert re.search(r"keys +memq +holds [01]\.\d{4} \(lowest [01]\.\d\d\)", out)
    for name in ("turns", "keys"):
        for ef in (16, 64):
            assert re.search(rf"{name} +HNSW ef {ef} +holds [01]\.\d{{4}} \(lowest [01]\.\d\d\) "
                             r"+p50 +[\d.]+ ms +p95 +[\d.]+ ms +x[\d.]+ / x[\d.]+ memq's", out)
        assert re.search(rf"{name} +HNSW built in [\d.]+ s on one thread; the process grew "
                         r"-?\d+ MiB", out)


def test_the_share_held_counts_the_exact_best_among_the_candidates() -> None:
    matrix = np.eye(60, dtype=np.float32)
    queries = np.ones((1, 60), dtype=np.float32) + np.eye(60, dtype=np.float32)[:1]
    exact = ann.exact_best(matrix, queries)
    assert 0 in exact[0]  # row 0 scores highest
    assert len(exact[0]) == ann.BEST
    share, lowest, times = ann.measure(lambda q: sorted(exact[0])[:25], queries, exact)
    assert (share, lowest, len(times)) == (0.5, 0.5, 1)
