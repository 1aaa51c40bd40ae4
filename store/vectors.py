"""Embedding storage: little-endian float32 blobs, with legacy JSON arrays still readable."""

from __future__ import annotations

import base64
import binascii

import numpy as np
import orjson

from memq.config import DEFAULT_MODEL_NAME, EmbedConfig
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


KNOWN_DIMS: dict[str, int] = {DEFAULT_MODEL_NAME: EmbedConfig.dim}
"""Dimensions of the models memq knows: a vector named after one of them has exactly that
many, or every search that compares it with a query of that model would fail."""

UNIT_NORM = (0.9, 1.1)
"""The norms an embedding may have: memq's models give unit vectors, and searches score by
dot product, so a longer one would outrank everything (or overflow to infinity)."""


def model_vector(text: str, dim: int, model: str) -> bytes:
    """:func:`blob_from_b64`, and the vector one ``model`` could have given: the model's
    dimensions where memq knows them, and unit length."""
    known = KNOWN_DIMS.get(model)
    if known is not None and dim != known:
        raise InvalidEvent(f"vector has {dim} dims, but {model} gives {known}")
    blob = blob_from_b64(text, dim)
    norm = float(np.linalg.norm(np.frombuffer(blob, dtype=FLOAT32_LE).astype(np.float64)))
    if not UNIT_NORM[0] <= norm <= UNIT_NORM[1]:
        raise InvalidEvent(f"vector must have unit length (an embedding's), got {norm:.4g}")
    return blob


def to_b64(vector: np.ndarray) -> str:
    return base64.b64encode(np.asarray(vector, dtype=FLOAT32_LE).tobytes()).decode("ascii")


def decode(value: bytes | str) -> np.ndarray:
    """A stored embedding as float32: a blob, or (legacy) a JSON array of numbers."""
    if isinstance(value, str):
        return np.asarray(orjson.loads(value), dtype=np.float32)
    return np.frombuffer(value, dtype=FLOAT32_LE)
