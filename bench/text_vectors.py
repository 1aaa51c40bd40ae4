"""Vectors of many texts, embedded once with the real model and kept on disk.

Embedding 100,000 LoCoMo turns takes ~8 minutes on two cores; a benchmark run that
builds several sizes of the same history must not pay that each time. The cache is a
directory holding ``texts.json`` (a list) and ``vectors.npy`` (one float32 row each, in
that order), per model; texts it lacks are embedded and added.
"""

from __future__ import annotations

import hashlib
import time
from collections.abc import Sequence
from pathlib import Path

import numpy as np
import orjson

from memq.embedding import Embedder

CHUNK = 4096
"""Texts embedded between two progress lines (and two saves)."""


class TextVectors:
    """A text -> vector map backed by ``directory``."""

    def __init__(self, directory: Path, embedder: Embedder) -> None:
        tag = hashlib.sha256(f"{embedder.model_name}/{embedder.dim}".encode()).hexdigest()[:12]
        self.directory = directory / f"vectors-{tag}"
        self.embedder = embedder
        self.texts: list[str] = []
        self.matrix = np.zeros((0, embedder.dim), dtype=np.float32)
        if (self.directory / "texts.json").exists():
            self.texts = orjson.loads((self.directory / "texts.json").read_bytes())
            self.matrix = np.load(self.directory / "vectors.npy")
        self.row = {text: i for i, text in enumerate(self.texts)}

    def vectors(self, texts: Sequence[str]) -> np.ndarray:
        """One unit row per text, embedding (and saving) those never seen."""
        missing = [t for t in dict.fromkeys(texts) if t not in self.row]
        began = time.perf_counter()
        for lo in range(0, len(missing), CHUNK):
            self._add(missing[lo : lo + CHUNK])
            done = min(lo + CHUNK, len(missing))
            rate = done / (time.perf_counter() - began)
            print(f"  embedded {done:,} of {len(missing):,} new texts ({rate:.0f}/s)", flush=True)
        return self.matrix[[self.row[t] for t in texts]]

    def _add(self, texts: list[str]) -> None:
        start = len(self.texts)
        self.matrix = np.vstack([self.matrix, self.embedder.embed(texts)])
        self.texts.extend(texts)
        self.row.update((t, start + i) for i, t in enumerate(texts))
        self.directory.mkdir(parents=True, exist_ok=True)
        np.save(self.directory / "vectors.npy", self.matrix)
        (self.directory / "texts.json").write_bytes(orjson.dumps(self.texts))
