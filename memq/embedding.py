"""The embedding model, shared by the embed workers and the query side of ``get_context``.

fastembed is imported and the model loaded on first use, from local files only (the model
cannot be fetched from a hub at run time). Vectors are float32 and L2-normalised, so a dot
product is the cosine similarity.

What makes a batch of agent messages cheap to embed (``bench/embed.py`` measures it):

- **Length-sorted batches.** The model pads every batch to its longest text, so one tool
  output among chat turns would make the whole batch cost as much as 64 tool outputs.
  :meth:`Embedder.embed` counts each text's tokens, sorts by that count and cuts batches
  of similar length, each bounded by ``[embed] batch_size`` texts and ``batch_tokens``
  tokens including padding (large batches of long texts run slower per text: their
  attention matrices leave the CPU's caches).
- **Identical texts once.** "ok", "thanks", a repeated tool output: each distinct text of
  a call is embedded once and its vector given to every copy.
- **The model's length.** The model reads at most ``[embed] max_tokens`` (256) word
  pieces of a text, the limit sentence-transformers sets for all-MiniLM-L6-v2 (its
  sentence training saw at most 128); the tokenizer files say 512, the size of the
  position table, which costs more than twice as much per long text. A longer text's
  vector describes its first ~250 word pieces (about 1,000 characters of prose, a dozen
  log lines); its words stay searchable through the lexical index.

A text's vector does not depend on what else is in its batch beyond float rounding
(cosine > 0.999 with the vector fastembed gives the same text, checked by the tests).

A process loads each model once, however many clients it makes: a loaded model is ~90 MB
of memory and 0.2-0.6 s of CPU, and onnxruntime's sessions and the tokenizers may be run
from several threads at once.
"""

from __future__ import annotations

import os
import threading
from collections.abc import Iterator, Sequence
from typing import Any

import numpy as np

from memq.config import EmbedConfig
from memq.errors import ModelError
from memq.model_files import verify

_LOADED: dict[tuple[str, str, int, int], tuple[Any, Any]] = {}
"""Models this process has loaded, by what makes them differ: files, name, threads, cap."""
_LOADING = threading.Lock()


class Embedder:
    """all-MiniLM-L6-v2 (or the configured model) through fastembed, loaded lazily."""

    def __init__(self, config: EmbedConfig | None = None) -> None:
        self.config = config or EmbedConfig()
        self._model: Any = None
        self._counter: Any = None

    @property
    def model_name(self) -> str:
        return self.config.model_name

    @property
    def dim(self) -> int:
        return self.config.dim

    def load(self) -> None:
        if self._model is not None:
            return
        c = self.config
        key = (os.path.realpath(c.model_dir), c.model_name, c.threads, c.max_tokens)
        with _LOADING:
            if key not in _LOADED:
                _LOADED[key] = self._load()
            model, self._counter = _LOADED[key]
            self._model = model  # last: another thread reads it without the lock

    def _load(self) -> tuple[Any, Any]:
        verify(self.config.model_dir)
        # Never reach for a model hub: the files are local, and this machine may be offline.
        os.environ.setdefault("HF_HUB_OFFLINE", "1")
        if self.config.threads == 1:
            # One thread means one core: the tokenizer would otherwise fan out over all.
            os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
        from fastembed import TextEmbedding

        try:
            model = TextEmbedding(
                self.config.model_name,
                specific_model_path=str(self.config.model_dir),
                threads=self.config.threads,
            )
        except Exception as exc:  # fastembed raises plain exceptions for bad model files
            name = self.config.model_name
            raise ModelError(f"cannot load embedding model {name}: {exc}") from exc
        return model, cap_tokens(model, self.config.max_tokens)

    def embed(self, texts: Sequence[str]) -> np.ndarray:
        """Embed ``texts``; returns an (n, dim) float32 array of unit vectors, in order."""
        if not texts:
            return np.zeros((0, self.dim), dtype=np.float32)
        self.load()
        distinct = list(dict.fromkeys(texts))
        vectors = np.empty((len(distinct), self.dim), dtype=np.float32)
        # One text (a query) has nothing to sort: skip counting its tokens.
        lengths = self.token_counts(distinct) if len(distinct) > 1 else [1]
        for batch in plan_batches(lengths, self.config.batch_size, self.config.batch_tokens):
            vectors[batch] = self._run([distinct[i] for i in batch])
        norms = np.linalg.norm(vectors, axis=1, keepdims=True)
        vectors /= np.maximum(norms, 1e-12)
        if len(distinct) == len(texts):
            return vectors
        row = {text: i for i, text in enumerate(distinct)}
        repeated: np.ndarray = vectors[[row[text] for text in texts]]
        return repeated

    def token_counts(self, texts: Sequence[str]) -> list[int]:
        """How many tokens the model reads of each text, [CLS] and [SEP] included."""
        self.load()
        return [len(encoding.ids) for encoding in self._counter.encode_batch(list(texts))]

    def _run(self, batch: list[str]) -> np.ndarray:
        vectors = np.asarray(list(self._model.embed(batch, batch_size=len(batch))),
                             dtype=np.float32)
        if vectors.shape[1] != self.dim:
            raise ModelError(f"model gives {vectors.shape[1]} dims, config says {self.dim}")
        return vectors


def cap_tokens(model: Any, max_tokens: int) -> Any:
    """Make ``model`` read at most ``max_tokens`` tokens of a text; return a tokenizer
    that counts tokens the same way, without padding.

    fastembed takes its limit from the tokenizer files (512 here) and has no option for
    it, so the limit is set on the tokenizer it loaded.
    """
    tokenizer = getattr(getattr(model, "model", None), "tokenizer", None)
    truncation = getattr(tokenizer, "truncation", None)
    if tokenizer is None or not truncation:
        raise ModelError("this fastembed version hides its tokenizer: memq cannot cap texts "
                         "at [embed] max_tokens (fastembed 0.9 is supported)")
    limit = int(truncation["max_length"])
    if max_tokens > limit:
        raise ModelError(f"[embed] max_tokens is {max_tokens}, but the model reads at most "
                         f"{limit} tokens")
    tokenizer.enable_truncation(max_length=max_tokens, direction=truncation["direction"])
    from tokenizers import Tokenizer

    counter = Tokenizer.from_str(tokenizer.to_str())
    counter.no_padding()
    return counter


def plan_batches(lengths: Sequence[int], max_texts: int, max_tokens: int) -> Iterator[list[int]]:
    """Indices of ``lengths`` in batches of similar length, shortest first.

    A batch costs its size times its longest text (the rest is padding): each holds at
    most ``max_texts`` texts and ``max_tokens`` tokens so counted; a text longer than
    ``max_tokens`` is a batch of its own.
    """
    batch: list[int] = []
    for i in sorted(range(len(lengths)), key=lengths.__getitem__):
        if batch and (len(batch) >= max_texts or (len(batch) + 1) * lengths[i] > max_tokens):
            yield batch
            batch = []
        batch.append(i)
    if batch:
        yield batch
