"""Embedding storage: little-endian float32 blobs, with legacy JSON arrays still readable."""

from __future__ import annotations

import base64
import binascii

import numpy as np
import orjson

from memq.errors import InvalidEvent

FLOAT32_LE = np.dtype("<f4")


def blob_from_b64(text: str, dim: int) -> bytes:
    """Decode a wire vector and check that it holds exactly ``dim`` finite float32s."""
    try:
        blob = base64.b64decode(text, validate=True)
    except (binascii.Error, ValueError) as exc:
        raise InvalidEvent(f"vector is not valid base64: {exc}") from exc
    if len(blob) != dim * FLOAT32_LE.itemsize:
        raise InvalidEvent(f"vector has {len(blob)} bytes, expected {dim * 4} for {dim} dims")
    if not np.isfinite(np.frombuffer(blob, dtype=FLOAT32_LE)).all():
        raise InvalidEvent("vector holds NaN or infinity")
    return blob


def to_b64(vector: np.ndarray) -> str:
    return base64.b64encode(np.asarray(vector, dtype=FLOAT32_LE).tobytes()).decode("ascii")


def decode(value: bytes | str) -> np.ndarray:
    """A stored embedding as float32: a blob, or (legacy) a JSON array of numbers."""
    if isinstance(value, str):
        return np.asarray(orjson.loads(value), dtype=np.float32)
    return np.frombuffer(value, dtype=FLOAT32_LE)
