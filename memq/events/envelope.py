"""Events on the wire: the envelope, encoding and decoding with validation.

An event on the wire is a JSON object::

    {"id": "<uuid>", "type": "message.appended", "v": 1, "session_id": "s1",
     "created_at": "2026-11-30T01:52:52.123456Z", "payload": {...}}

This module is pure (no storage, no Redis) so producers and the writer validate with the
same code.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

import orjson

from memq.clock import normalize_rfc3339
from memq.config import LimitsConfig
from memq.errors import InvalidEvent, ValidationError
from memq.events.fields import (
    SHORT,
    SURROGATE,
    Schema,
    check_fields,
    check_identifier,
    normalized_timestamps,
)
from memq.events.vocabulary import SCHEMAS, UPCASTERS
from memq.printable import shown

ENVELOPE_FIELDS = frozenset({"id", "type", "v", "session_id", "created_at", "payload"})
"""The keys of an event on the wire; any other is refused."""


@dataclass(frozen=True)
class Event:
    id: str
    type: str
    session_id: str | None
    created_at: str
    payload: dict[str, Any] = field(default_factory=dict)
    version: int = 0
    """The payload's schema version; 0 (the default) stands for its type's current one."""

    def __post_init__(self) -> None:
        if self.version == 0:
            schema = SCHEMAS.get(self.type)
            object.__setattr__(self, "version", 1 if schema is None else schema.version)

    def to_json(self) -> bytes:
        return encode(self)


def encode(event: Event) -> bytes:
    """The wire form; raises :class:`ValidationError` for values JSON cannot carry."""
    try:
        return orjson.dumps(
            {
                "id": event.id,
                "type": event.type,
                "v": event.version,
                "session_id": event.session_id,
                "created_at": event.created_at,
                "payload": event.payload,
            }
        )
    except TypeError as exc:
        where = _surrogate_path(event)
        if where is not None:
            raise ValidationError(
                f"{where} contains a lone surrogate, which is not valid UTF-8") from None
        raise ValidationError(f"event cannot be encoded as JSON: {exc}") from exc


def _surrogate_path(event: Event) -> str | None:
    """Where a lone surrogate hides in an event, if that is why it cannot be encoded.

    Only called once encoding has failed, so the good path pays nothing for it.
    """
    for name in ("id", "type", "session_id", "created_at"):
        if _find_surrogate(getattr(event, name), 0) is not None:
            return name
    found = _find_surrogate(event.payload, 0)
    return None if found is None else f"payload.{found}"


def _find_surrogate(value: Any, depth: int) -> str | None:
    """The dotted path of the first string holding a lone surrogate ("" for ``value``)."""
    if isinstance(value, str):
        return "" if SURROGATE.search(value) else None
    if depth > 64 or not isinstance(value, (dict, list)):  # orjson stops at 255 anyway
        return None
    pairs: Any = value.items() if isinstance(value, dict) else enumerate(value)
    for key, item in pairs:
        if isinstance(key, str) and SURROGATE.search(key):
            return f"{shown(key)}"  # the repr escapes the surrogate, so the message prints
        inner = _find_surrogate(item, depth + 1)
        if inner is not None:
            return f"{key}.{inner}" if inner else str(key)
    return None


def decode(raw: bytes | str, limits: LimitsConfig | None = None) -> Event:
    """Parse and validate one wire event; raises :class:`InvalidEvent` with the reason."""
    limits = limits or LimitsConfig()
    if len(raw) > limits.max_payload_bytes:
        raise InvalidEvent(f"event is {len(raw)} bytes, over the {limits.max_payload_bytes} limit")
    try:
        data = orjson.loads(raw)
    except orjson.JSONDecodeError as exc:
        raise InvalidEvent(f"not valid JSON: {exc}") from exc
    return from_dict(data, limits)


def from_dict(data: Any, limits: LimitsConfig | None = None) -> Event:
    limits = limits or LimitsConfig()
    if not isinstance(data, dict):
        raise InvalidEvent(f"event must be a JSON object, got {type(data).__name__}")
    unknown = set(data) - ENVELOPE_FIELDS
    if unknown:
        raise InvalidEvent(f"unknown event field(s): {', '.join(sorted(unknown))}")
    etype = _string(data, "type", SHORT)
    schema = SCHEMAS.get(etype)
    if schema is None:
        raise InvalidEvent(f"unknown event type {shown(etype)}")
    payload = data.get("payload")
    if not isinstance(payload, dict):
        raise InvalidEvent(f"{etype}: payload must be a JSON object")
    version, payload = _upcast(etype, data.get("v"), payload, schema)
    event = Event(
        id=_event_id(data),
        type=etype,
        version=version,
        session_id=_session(data, schema, limits),
        created_at=_created_at(data),
        payload=payload,
    )
    checked = checked_payload(event.type, payload, limits)
    return event if checked is payload else dataclasses.replace(event, payload=checked)


def _upcast(
    etype: str, version: Any, payload: dict[str, Any], schema: Schema
) -> tuple[int, dict[str, Any]]:
    if not isinstance(version, int) or isinstance(version, bool) or version < 1:
        raise InvalidEvent(f"{etype}: v must be a positive integer, got {shown(version)}")
    while version < schema.version:
        upcaster = UPCASTERS.get((etype, version))
        if upcaster is None:
            raise InvalidEvent(f"{etype}: no upcaster from version {version}")
        payload, version = upcaster(payload), version + 1
    if version > schema.version:
        raise InvalidEvent(
            f"{etype}: unsupported version {version} (this writer knows {schema.version})"
        )
    return version, payload


def _string(data: Mapping[str, Any], key: str, max_chars: int) -> str:
    value = data.get(key)
    if not isinstance(value, str) or not value:
        raise InvalidEvent(f"{key} must be a non-empty string, got {shown(value):.60}")
    if len(value) > max_chars:
        raise InvalidEvent(f"{key} is {len(value)} characters, over the {max_chars} limit")
    return value


def _event_id(data: Mapping[str, Any]) -> str:
    return check_identifier("id", data.get("id"), error=InvalidEvent)


def _session(data: Mapping[str, Any], schema: Schema, limits: LimitsConfig) -> str | None:
    session = data.get("session_id")
    if session is None and not schema.needs_session:
        return None
    return check_identifier(
        "session_id", session, max_chars=limits.max_session_id_chars, error=InvalidEvent
    )


def _created_at(data: Mapping[str, Any]) -> str:
    """The producer's clock, strict RFC3339, stored in UTC: timestamps sort as text."""
    value: Any = data.get("created_at")  # any JSON value: the parser names a wrong type
    try:
        return normalize_rfc3339(value, what="created_at")
    except ValidationError as exc:
        raise InvalidEvent(str(exc)) from exc


MAX_DEPTH = 64
"""The most levels of objects and lists a payload may nest, itself included. Every read
path wraps what it returns in a few more (an HTTP body, a list of results), and JSON
encoders stop somewhere (orjson at 255): what the writer applies, every reader can return."""


def check_payload(etype: str, payload: Mapping[str, Any], limits: LimitsConfig) -> None:
    """Validate a payload against its type's schema; raises :class:`InvalidEvent`."""
    _check_depth(etype, payload)
    check_fields(etype, SCHEMAS[etype].fields, payload, limits)


def checked_payload(etype: str, payload: dict[str, Any], limits: LimitsConfig) -> dict[str, Any]:
    """Validate a payload; return it as it is stored (timestamps in canonical UTC form)."""
    _check_depth(etype, payload)
    fields = SCHEMAS[etype].fields
    check_fields(etype, fields, payload, limits)
    return normalized_timestamps(fields, payload)


def _check_depth(etype: str, payload: Mapping[str, Any]) -> None:
    """:data:`MAX_DEPTH`, walked without recursion (the value may be deeper than Python's
    stack allows, from a parser that allows more); and no NaN or infinity inside a value
    (a document's, a tool call's arguments): JSON has no such number, and the encoder
    would write null, so what a reader returned would not be what was stored. (The
    payload's own fields are checked by their schema.)"""
    level: list[Any] = [payload]
    for depth in range(1, MAX_DEPTH + 2):
        inner: list[Any] = []
        for value in level:
            inner += value.values() if isinstance(value, dict) else value
        if depth > 1 and any(isinstance(v, float) and not math.isfinite(v) for v in inner):
            raise InvalidEvent(f"{etype}: payload holds a number that is not finite (NaN or "
                               "infinity), which JSON cannot carry")
        level = [v for v in inner if isinstance(v, (dict, list))]
        if not level:
            return
        if depth == MAX_DEPTH:
            raise InvalidEvent(
                f"{etype}: payload nests more than {MAX_DEPTH} levels of objects and lists")
