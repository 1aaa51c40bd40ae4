"""The embedding model, shared by the embed workers and the query side of ``get_context``.

fastembed is imported and the model loaded on first use, from local files only (the model
cannot be fetched from a hub at run time). Vectors are float32 and L2-normalised, so a dot
product is the cosine similarity.
"""

from __future__ import annotations

import os
import threading
from collections.abc import Sequence
from typing import Any

import numpy as np

from memq.config import EmbedConfig
from memq.errors import ModelError
from memq.model_files import verify


class Embedder:
    """all-MiniLM-L6-v2 (or the configured model) through fastembed, loaded lazily."""

    def __init__(self, config: EmbedConfig | None = None) -> None:
        self.config = config or EmbedConfig()
        self._model: Any = None
        self._lock = threading.Lock()

    @property
    def model_name(self) -> str:
        return self.config.model_name

    @property
    def dim(self) -> int:
        return self.config.dim

    def load(self) -> None:
        with self._lock:
            if self._model is None:
                self._model = self._load()

    def _load(self) -> Any:
        verify(self.config.model_dir)
        # Never reach for a model hub: the files are local, and this machine may be offline.
        os.environ.setdefault("HF_HUB_OFFLINE", "1")
        from fastembed import TextEmbedding

        try:
            return TextEmbedding(
                self.config.model_name,
                specific_model_path=str(self.config.model_dir),
                threads=self.config.threads,
            )
        except Exception as exc:  # fastembed raises plain exceptions for bad model files
            name = self.config.model_name
            raise ModelError(f"cannot load embedding model {name}: {exc}") from exc

    def embed(self, texts: Sequence[str]) -> np.ndarray:
        """Embed ``texts``; returns an (n, dim) float32 array of unit vectors."""
        if not texts:
            return np.zeros((0, self.dim), dtype=np.float32)
        self.load()
        vectors = np.asarray(
            list(self._model.embed(list(texts), batch_size=self.config.batch_size)),
            dtype=np.float32,
        )
        if vectors.shape[1] != self.dim:
            raise ModelError(f"model gives {vectors.shape[1]} dims, config says {self.dim}")
        norms = np.linalg.norm(vectors, axis=1, keepdims=True)
        normalised: np.ndarray = vectors / np.maximum(norms, 1e-12)
        return normalised
