"""bench/context.py --realistic on a small LoCoMo-shaped file: every figure it promises."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from bench import context_realistic
from memq.store.read import neighbourhoods
from tests.bench.test_retrieval_bench import small_file
from tests.conftest import MODEL_DIR

pytestmark = [pytest.mark.redis, pytest.mark.model]


def test_the_realistic_bench_prints_latency_recall_baselines_and_memory(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    args = ["--data", str(small_file(tmp_path, conversations=2)), "--sizes", "20,200",
            "--calls", "3", "--cache", str(tmp_path / "cache"), "--model-dir", str(MODEL_DIR),
            "--embed-up-to", "150"]
    context_realistic.main(args)
    out = capsys.readouterr().out
    assert "3 questions of 4 (categories 1-4)" in out
    assert re.search(r"\n\d+ turns in one user \(asked for 20; built in", out)
    assert re.search(r"recall -", out)  # 20 turns cut the originals: no recall to give
    assert re.search(r"2\d\d turns in one user \(asked for 200; .*; \d+ turns carry an "
                     r"earlier copy's vector\)", out)
    assert re.search(r"evidence recall (0|1)\.\d{3}", out)
    assert re.search(r"evidence recall by conversation: \S+ (0|1)\.\d{3}", out)
    for line in ("get_context, user scope", "BM25 top-20", "cosine top-20", "BM25 best 1,000"):
        assert len(re.findall(rf"{line} +p50 +[\d.]+ ms +p95 +[\d.]+ ms", out)) == 2, line
    assert re.search(r"vector cache \d+ MiB \(\d+ MiB per 100,000 vectors\)", out)
    assert len(re.findall(r"a fresh reader process grew -?\d+ MiB loading the scope and "
                          r"answering 3 questions", out)) == 2
    assert "contextual keys: whole (a search over them is exact)" in out  # small: not projected
    assert "profile recall; one BLAS thread" in out
    monkeypatch.setattr(neighbourhoods, "PROJECT_FROM", 100)  # as a large history's
    context_realistic.main([*args, "--set", "recall_name_penalty=0"])
    out = capsys.readouterr().out
    assert "profile recall, recall_name_penalty = 0; one BLAS thread" in out
    assert "embedded" not in out  # every vector came from the cache
    assert re.search(r"contextual keys: projected; a search returns [01]\.\d{4} of the "
                     r"exact best 50 \(lowest [01]\.\d\d\); its candidates by the first "
                     r"block's leaders p50 [\d.]+ ms, by an exact search of the projection "
                     r"p50 [\d.]+ ms", out)


def test_a_setting_out_of_range_is_refused_before_anything_is_built(tmp_path: Path) -> None:
    with pytest.raises(SystemExit, match=r"recall_name_penalty must be between 0\.0 and 1\.0"):
        context_realistic.main(["--data", str(small_file(tmp_path)), "--cache",
                                str(tmp_path / "cache"), "--set", "recall_name_penalty=2"])
    assert not (tmp_path / "cache").exists()
