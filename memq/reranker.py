"""An optional cross-encoder that re-scores the recall profile's best candidates.

Off by default. ``[retrieval] reranker_dir`` names a local directory holding a cross-encoder
in fastembed's layout (``model.onnx`` whose first output holds one score per pair, plus
``tokenizer.json``, ``tokenizer_config.json``, ``special_tokens_map.json`` and
``config.json``); it is loaded from there on first use through fastembed's
``TextCrossEncoder`` (``specific_model_path``), never fetched from a hub. Then the best
``[retrieval] reranker_candidates`` turns of the relevance branch are ordered by the
cross-encoder's score of (query, turn) before the budget is cut.

No cross-encoder's files can be had on the machine memq was measured on, so what one is
worth on the development conversations is not known; the loading path and the reordering
are tested with a tiny model the tests build (tests/memq/test_reranker.py).
"""

from __future__ import annotations

import os
import threading
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from memq.errors import ModelError

MODEL_NAME = "memq/local-cross-encoder"
"""The name the local directory's model is registered under in fastembed."""

FILES = ("model.onnx", "tokenizer.json", "tokenizer_config.json", "config.json")
"""What the directory must hold (``special_tokens_map.json`` is read when present)."""

_registered = threading.Lock()


class Reranker:
    """A cross-encoder from ``model_dir``, loaded on first use; safe to share."""

    def __init__(self, model_dir: str, threads: int = 1) -> None:
        self.model_dir = model_dir
        self.threads = threads
        self._model: Any = None
        self._lock = threading.Lock()

    def scores(self, query: str, documents: Sequence[str]) -> list[float]:
        """The cross-encoder's score of each (query, document), larger is more relevant."""
        if not documents:
            return []
        model = self._loaded()
        return [float(s) for s in model.rerank(query, list(documents), batch_size=64)]

    def _loaded(self) -> Any:
        with self._lock:
            if self._model is None:
                self._model = self._load()
            return self._model

    def _load(self) -> Any:
        where = Path(self.model_dir)
        missing = [name for name in FILES if not (where / name).is_file()]
        if missing:
            raise ModelError(f"[retrieval] reranker_dir {self.model_dir!r} lacks "
                             f"{', '.join(missing)} (a cross-encoder in fastembed's layout)")
        os.environ.setdefault("HF_HUB_OFFLINE", "1")
        from fastembed.common.model_description import ModelSource
        from fastembed.rerank.cross_encoder import TextCrossEncoder

        with _registered:
            known = {m["model"].lower() for m in TextCrossEncoder.list_supported_models()}
            if MODEL_NAME.lower() not in known:
                TextCrossEncoder.add_custom_model(MODEL_NAME, ModelSource(hf=MODEL_NAME),
                                                  model_file="model.onnx")
        try:
            return TextCrossEncoder(MODEL_NAME, specific_model_path=str(where),
                                    threads=self.threads)
        except Exception as exc:  # fastembed raises plain exceptions for bad model files
            raise ModelError(f"[retrieval] reranker_dir {self.model_dir!r}: cannot load the "
                             f"cross-encoder: {exc}") from exc
