"""bench/embedders.py on a small LoCoMo-shaped file: every figure it promises."""

from __future__ import annotations

import re
from pathlib import Path

import numpy as np
import pytest

from bench import embedders
from tests.bench.test_retrieval_bench import small_file
from tests.conftest import MODEL_DIR


@pytest.mark.model
def test_the_bench_prints_each_model_and_both_and_their_speed(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    embedders.main(["--data", str(small_file(tmp_path)), "--model-dir", str(MODEL_DIR)])
    out = capsys.readouterr().out
    assert "1 conversations; MiniLM int8 (2 threads) and multilingual-e5-small 4-bit" in out
    assert re.search(r"cosine top-20 +1 multi-hop +4 single-hop +all", out)
    for name in ("MiniLM", "e5", "both, z-scores summed"):
        assert re.search(rf"\n{re.escape(name)} +[01]\.\d{{3}} +[01]\.\d{{3}} +[01]\.\d{{3}}\n",
                         out), name
    assert re.search(r"\d+ turns in one call: MiniLM \d+/s, e5 \d+/s \(x[\d.]+ MiniLM's "
                     r"time\); one question: MiniLM p50 [\d.]+ ms, e5 p50 [\d.]+ ms", out)


def test_z_scores_put_each_models_cosines_on_one_scale() -> None:
    scores = np.array([0.2, 0.4, 0.6], dtype=np.float32)
    assert embedders.zscores(scores) == pytest.approx([-1.2247, 0.0, 1.2247], abs=1e-4)
    assert embedders.zscores(np.full(3, 0.5)).tolist() == [0.0, 0.0, 0.0]  # no spread
