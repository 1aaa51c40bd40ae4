"""Feeding ``message.embedded`` events through the inbox, as the embed workers do."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from memq import MemoryClient
from memq.clock import now_rfc3339, uuid7
from memq.config import DEFAULT_MODEL_NAME
from memq.events import Event, EventType
from memq.store.vectors import to_b64


def embedded_event(message_id: str, vector: np.ndarray, model: str = DEFAULT_MODEL_NAME) -> Event:
    vector = np.asarray(vector, dtype=np.float32)
    return Event(
        id=uuid7(), type=EventType.MESSAGE_EMBEDDED, session_id=None, created_at=now_rfc3339(),
        payload={"message_id": message_id, "model": model, "dim": int(vector.shape[0]),
                 "vector_b64": to_b64(vector)},
    )


def send_embeddings(
    client: MemoryClient, ids: Sequence[str], vectors: np.ndarray,
    model: str = DEFAULT_MODEL_NAME,
) -> None:
    """XADD one event per vector to the inbox and wait until the writer committed them."""
    for message_id, vector in zip(ids, vectors, strict=True):
        client.outbox.send(embedded_event(message_id, vector, model))
    client.flush()
