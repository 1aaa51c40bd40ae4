"""The shared embedder: batches planned by length, identical texts once, the 256-token cap.

The reference for every vector is fastembed itself, given the same texts in arrival order
with its own defaults (one batch of 64, texts read up to 512 tokens).
"""

from __future__ import annotations

import dataclasses
import os
import random

import numpy as np
import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st

from bench.agent_mix import agent_mix, tool_output
from memq.config import DEFAULT_MODEL_NAME, Config, EmbedConfig
from memq.embedding import Embedder, cap_tokens, plan_batches
from memq.errors import ConfigError, ModelError
from tests.conftest import MODEL_DIR

# -- planning batches (no model) -------------------------------------------------------------


@settings(max_examples=300, derandomize=True)
@given(lengths=st.lists(st.integers(1, 600), max_size=200),
       max_texts=st.integers(1, 80), max_tokens=st.integers(1, 5000))
@example(lengths=[], max_texts=1, max_tokens=1)
@example(lengths=[600, 1, 600], max_texts=64, max_tokens=100)
def test_batches_hold_every_text_once_within_both_limits(
    lengths: list[int], max_texts: int, max_tokens: int
) -> None:
    batches = list(plan_batches(lengths, max_texts, max_tokens))
    assert sorted(i for batch in batches for i in batch) == list(range(len(lengths)))
    for batch in batches:
        assert 1 <= len(batch) <= max_texts
        padded = len(batch) * max(lengths[i] for i in batch)
        assert padded <= max_tokens or len(batch) == 1
    in_order = [lengths[i] for batch in batches for i in batch]
    assert in_order == sorted(in_order)


def test_short_texts_fill_batches_and_long_ones_get_small_batches() -> None:
    lengths = [20] * 100 + [256] * 20
    sizes = [len(b) for b in plan_batches(lengths, max_texts=64, max_tokens=2048)]
    assert sizes == [64, 36, 8, 8, 4]


@pytest.mark.parametrize(("key", "value"), [("max_tokens", 1), ("batch_tokens", 0),
                                            ("batch_size", 0), ("threads", 0), ("workers", -1)])
def test_embed_settings_out_of_range_are_refused(key: str, value: int) -> None:
    with pytest.raises(ConfigError, match=f"\\[embed\\] {key} must be at least"):
        EmbedConfig(**{key: value})


# -- the real model ---------------------------------------------------------------------------


@pytest.fixture(scope="module")
def embedder() -> Embedder:
    return Embedder(dataclasses.replace(Config().embed, model_dir=str(MODEL_DIR)))


@pytest.fixture(scope="module")
def reference() -> object:
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    from fastembed import TextEmbedding

    return TextEmbedding(DEFAULT_MODEL_NAME, specific_model_path=str(MODEL_DIR), threads=1)


def fastembed_vectors(model: object, texts: list[str]) -> np.ndarray:
    return np.asarray(list(model.embed(texts, batch_size=64)), dtype=np.float32)  # type: ignore[attr-defined]


@pytest.mark.model
def test_short_texts_keep_fastembeds_vectors_in_any_company(
    embedder: Embedder, reference: object
) -> None:
    texts = agent_mix(60, seed=3)  # tool outputs among the turns
    ours = embedder.embed(texts)
    short = [i for i, n in enumerate(embedder.token_counts(texts)) if n < 256]
    assert 30 < len(short) < len(texts)
    theirs = fastembed_vectors(reference, [texts[i] for i in short])
    cosines = (ours[short] * theirs).sum(axis=1)
    assert cosines.min() > 0.999
    assert np.allclose(np.linalg.norm(ours, axis=1), 1.0, atol=1e-5)


@pytest.mark.model
def test_a_long_text_is_embedded_from_its_first_256_tokens(
    embedder: Embedder, reference: object
) -> None:
    rng = random.Random(5)
    head = tool_output(rng, lines=30)
    tail_a, tail_b = tool_output(rng, lines=20), tool_output(rng, lines=20)
    assert embedder.token_counts([head]) == [256]  # the head alone fills the window
    a, b = embedder.embed([f"{head}\n{tail_a}", f"{head}\n{tail_b}"])
    assert float(a @ b) > 0.9999  # what lies past the window does not count
    full = fastembed_vectors(reference, [f"{head}\n{tail_a}"])[0]
    assert float(a @ full) < 0.99  # fastembed alone would read 512 tokens


@pytest.mark.model
def test_identical_texts_are_embedded_once_and_every_copy_gets_the_vector(
    embedder: Embedder, monkeypatch: pytest.MonkeyPatch
) -> None:
    seen: list[str] = []
    run = Embedder._run

    def counting(self: Embedder, batch: list[str]) -> np.ndarray:
        seen.extend(batch)
        return run(self, batch)

    monkeypatch.setattr(Embedder, "_run", counting)
    texts = ["ok", "The deploy finished at 14:02.", "ok", "thanks", "ok"]
    vectors = embedder.embed(texts)
    assert sorted(seen) == sorted(set(texts))
    assert np.array_equal(vectors[0], vectors[2])
    assert np.array_equal(vectors[0], vectors[4])
    alone = embedder.embed(["The deploy finished at 14:02."])[0]
    assert float(vectors[1] @ alone) > 0.999  # rows stay in the order asked


@pytest.mark.model
def test_a_process_loads_a_model_once_for_every_client(embedder: Embedder) -> None:
    same, capped = Embedder(embedder.config), Embedder(
        dataclasses.replace(embedder.config, max_tokens=64))
    for e in (embedder, same, capped):
        e.load()
    assert same._model is embedder._model
    assert capped._model is not embedder._model  # the cap is set on the model's tokenizer
    long = " ".join(["word"] * 200)
    assert capped.token_counts([long]) == [64]
    assert same.token_counts([long]) == [202]


@pytest.mark.model
def test_a_cap_beyond_what_the_model_reads_is_refused() -> None:
    config = dataclasses.replace(Config().embed, model_dir=str(MODEL_DIR), max_tokens=1024)
    with pytest.raises(ModelError, match="max_tokens is 1024, but the model reads at most 512"):
        Embedder(config).embed(["hello"])


def test_a_fastembed_that_hides_its_tokenizer_is_refused_not_run_uncapped() -> None:
    with pytest.raises(ModelError, match="cannot cap texts at \\[embed\\] max_tokens"):
        cap_tokens(object(), 256)
