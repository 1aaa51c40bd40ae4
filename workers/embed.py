"""The embed job: a batch of messages in, ``message.embedded`` events out through the inbox.

The model is loaded once per worker process (on the first job) and kept warm. Failures are
retried here, with exponential backoff, rather than with RQ's ``Retry``: RQ schedules a
retry with a delay in its ScheduledJobRegistry, which only a worker running RQ's own
scheduler empties (``memq worker`` runs without it), and the final failure must reach the
writer as an event carrying its reason. When the batch still fails, each message is tried
alone, so one message the model cannot take does not fail the others; a message that
still fails gets ``message.embedding_failed``. Blank messages are skipped: they are never
sent to the model and get no error.
"""

from __future__ import annotations

import base64
import logging
import time
from collections.abc import Sequence
from typing import Any

import numpy as np

from memq.clock import now_rfc3339, uuid7
from memq.config import EmbedConfig, LimitsConfig
from memq.embedding import Embedder
from memq.errors import ModelError, ValidationError
from memq.events import Event, EventType, check_payload
from memq.logs import log
from memq.workers import context

logger = logging.getLogger("memq.worker.embed")

MAX_ERROR_CHARS = 4000
"""The ``error`` field of ``message.embedding_failed`` holds at most this many characters."""

_embedder: Embedder | None = None


def embedder(config: EmbedConfig) -> Embedder:
    """The process-wide embedder; rebuilt only if the configuration changes."""
    global _embedder
    if _embedder is None or _embedder.config != config:
        _embedder = Embedder(config)
    return _embedder


def embed_messages(model: str, messages: list[dict[str, Any]]) -> dict[str, int]:
    """Embed ``messages`` ([{message_id, content}]) with ``model``; results go to the writer."""
    started = time.perf_counter()
    batch = _parse(messages)
    worker = context.current()
    emb = embedder(worker.config.embed)
    if model != emb.model_name:
        # Not the message's fault: leave it for a worker that has the model.
        raise ModelError(f"job asks for model {model!r}; this worker has {emb.model_name!r}")
    todo = [(mid, text) for mid, text in batch if text.strip()]
    vectors, errors = embed_batch(emb, [text for _, text in todo])
    limits = worker.config.limits
    events = [_result_event(emb, mid, vectors.get(i), errors.get(i), limits)
              for i, (mid, _) in enumerate(todo)]
    worker.send(events)
    counts = {"embedded": len(vectors), "failed": len(errors), "skipped": len(batch) - len(todo)}
    log(logger, "embed job done", **counts, ms=round((time.perf_counter() - started) * 1000, 1))
    return counts


def embed_batch(
    emb: Embedder, texts: Sequence[str]
) -> tuple[dict[int, np.ndarray], dict[int, str]]:
    """Vectors by index, and the reason by index for those that could not be embedded."""
    if not texts:
        return {}, {}
    try:
        return dict(enumerate(_with_retries(emb, texts))), {}
    except Exception as exc:  # whatever the model raised, after the last retry
        if len(texts) == 1:
            return {}, {0: _reason(exc)}
    return _one_by_one(emb, texts)


def _one_by_one(
    emb: Embedder, texts: Sequence[str]
) -> tuple[dict[int, np.ndarray], dict[int, str]]:
    """Find the message(s) the model cannot take, so the others still get their vector."""
    vectors: dict[int, np.ndarray] = {}
    errors: dict[int, str] = {}
    for i, text in enumerate(texts):
        try:
            vectors[i] = emb.embed([text])[0]
        except Exception as exc:
            errors[i] = _reason(exc)
    return vectors, errors


def _with_retries(emb: Embedder, texts: Sequence[str]) -> np.ndarray:
    backoff = emb.config.retry_backoff_s
    for attempt in range(emb.config.max_retries):
        try:
            return emb.embed(texts)
        except Exception as exc:
            delay = backoff * 2**attempt
            log(logger, "embedding failed, retrying", logging.WARNING, attempt=attempt + 1,
                delay_s=delay, error=_reason(exc))
            time.sleep(delay)
    return emb.embed(texts)  # the last attempt: what it raises is the reason recorded


def _reason(exc: BaseException) -> str:
    return f"{type(exc).__name__}: {exc}"[:MAX_ERROR_CHARS]


def _parse(messages: Any) -> list[tuple[str, str]]:
    """The job's data comes from Redis: check its shape before trusting it."""
    if not isinstance(messages, list):
        raise ValidationError(f"messages must be a list, got {type(messages).__name__}")
    batch = []
    for item in messages:
        if not (isinstance(item, dict) and isinstance(item.get("message_id"), str)
                and isinstance(item.get("content"), str)):
            raise ValidationError(f"each message must be {{message_id, content}}, got {item!r:.80}")
        batch.append((item["message_id"], item["content"]))
    return batch


def _result_event(
    emb: Embedder, message_id: str, vector: np.ndarray | None, error: str | None,
    limits: LimitsConfig,
) -> Event:
    if vector is not None:
        etype = EventType.MESSAGE_EMBEDDED
        payload: dict[str, Any] = {"message_id": message_id, "model": emb.model_name,
                                   "dim": emb.dim, "vector_b64": to_b64(vector)}
    else:
        etype = EventType.MESSAGE_EMBEDDING_FAILED
        payload = {"message_id": message_id, "model": emb.model_name, "error": error or "?"}
    check_payload(etype, payload, limits)
    return Event(id=uuid7(), type=etype, session_id=None, created_at=now_rfc3339(),
                 payload=payload)


def to_b64(vector: np.ndarray) -> str:
    """The wire form of a vector: little-endian float32, base64 (as ``store.vectors``)."""
    return base64.b64encode(np.asarray(vector, dtype="<f4").tobytes()).decode("ascii")
