"""The optional cross-encoder, loaded from a local directory through fastembed.

No real cross-encoder's files can be had here, so the test builds a tiny one: the
all-MiniLM-L6-v2 tokenizer files and an ONNX graph whose score of a (query, text) pair
is the mean of its token ids. Deterministic, so the order it gives can be checked.
"""

from __future__ import annotations

import dataclasses
import shutil
from pathlib import Path

import numpy as np
import pytest
from tokenizers import Tokenizer

from memq import MemoryClient
from memq.config import Config
from memq.errors import ModelError
from memq.reranker import Reranker
from tests.conftest import MODEL_DIR

TOKENIZER_FILES = ("tokenizer.json", "tokenizer_config.json", "special_tokens_map.json",
                   "config.json")


def tiny_cross_encoder(where: Path) -> Path:
    """A model directory in fastembed's layout: score = mean token id of the pair
    (padding left out: sum of ids under the mask / length)."""
    import onnx  # here, not at the top: a second and a half of every test process's start
    from onnx import TensorProto, helper

    where.mkdir()
    for name in TOKENIZER_FILES:
        shutil.copyfile(MODEL_DIR / name, where / name)
    ids = helper.make_tensor_value_info("input_ids", TensorProto.INT64, ["batch", "seq"])
    mask = helper.make_tensor_value_info("attention_mask", TensorProto.INT64, ["batch", "seq"])
    logits = helper.make_tensor_value_info("logits", TensorProto.FLOAT, ["batch", 1])
    nodes = [
        helper.make_node("Mul", ["input_ids", "attention_mask"], ["masked"]),
        helper.make_node("Cast", ["masked"], ["ids_f"], to=TensorProto.FLOAT),
        helper.make_node("Cast", ["attention_mask"], ["mask_f"], to=TensorProto.FLOAT),
        helper.make_node("ReduceMean", ["ids_f"], ["ids_mean"], axes=[1], keepdims=1),
        helper.make_node("ReduceMean", ["mask_f"], ["mask_mean"], axes=[1], keepdims=1),
        helper.make_node("Div", ["ids_mean", "mask_mean"], ["logits"]),
    ]
    graph = helper.make_graph(nodes, "mean_token_id", [ids, mask], [logits])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])
    model.ir_version = 8
    onnx.save(model, str(where / "model.onnx"))
    return where


def mean_token_id(query: str, text: str) -> float:
    """What the tiny model computes, from the same tokenizer."""
    tokenizer = Tokenizer.from_file(str(MODEL_DIR / "tokenizer.json"))
    encoding = tokenizer.encode(query, text)
    return float(np.mean([i for i, m in zip(encoding.ids, encoding.attention_mask,
                                            strict=True) if m]))


def test_a_local_cross_encoder_scores_pairs(tmp_path: Path) -> None:
    reranker = Reranker(str(tiny_cross_encoder(tmp_path / "tiny")))
    texts = ["apple pie", "zebra zoo zucchini", "a"]
    scores = reranker.scores("which one?", texts)
    assert scores == pytest.approx([mean_token_id("which one?", t) for t in texts], rel=1e-5)
    assert reranker.scores("which one?", []) == []


def test_a_directory_without_the_files_is_a_clear_error(tmp_path: Path) -> None:
    with pytest.raises(ModelError, match=r"reranker_dir .* lacks model\.onnx, tokenizer\.json"):
        Reranker(str(tmp_path)).scores("q", ["t"])
    broken = tiny_cross_encoder(tmp_path / "broken")
    (broken / "model.onnx").write_bytes(b"not a model")
    with pytest.raises(ModelError, match="cannot load the cross-encoder"):
        Reranker(str(broken)).scores("q", ["t"])


@pytest.mark.redis
def test_the_recall_profile_orders_its_best_turns_by_the_cross_encoder(
    config: Config, writer: object, tmp_path: Path
) -> None:
    retrieval = dataclasses.replace(config.retrieval, profile="recall", recall_budget=1,
                                    recall_recency_limit=0, recall_importance_limit=0,
                                    reranker_dir=str(tiny_cross_encoder(tmp_path / "tiny")),
                                    reranker_candidates=3)
    texts = ["The garden has roses.", "Zebras visit the garden zone.", "A garden."]
    query = "garden"
    with MemoryClient(config=config.replace(retrieval=retrieval)) as client:
        for text in texts:
            client.append("s1", "user", text)
        client.flush()
        items = client.get_context("s1", query)  # lexical matches only: nothing embedded
    # BM25 prefers the short "A garden."; of the three, the cross-encoder prefers the one
    # with the largest mean token id, and a budget of one keeps only that.
    best = max(texts, key=lambda t: mean_token_id(query, t))
    assert [i.content for i in items] == [best]
    assert items[0].scores["rerank"] == pytest.approx(mean_token_id(query, best), rel=1e-5)
