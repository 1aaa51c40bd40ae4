"""The event vocabulary: every change to memq's state is one of these events.

An event on the wire is a JSON object::

    {"id": "<uuid>", "type": "message.appended", "v": 1, "session_id": "s1",
     "created_at": "2026-11-30T01:52:52.123456Z", "payload": {...}}

Types are past tense. Each type has a schema version; a payload that changes shape gets
a new version and an upcaster from the old one, because stored events are never
rewritten. This module is pure (no storage, no Redis) so producers and the writer
validate with the same code.
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any

import orjson

from memq.clock import parse_rfc3339
from memq.config import LimitsConfig
from memq.errors import InvalidEvent, ValidationError


class EventType(StrEnum):
    MESSAGE_APPENDED = "message.appended"
    MESSAGE_IMPORTED = "message.imported"
    MESSAGE_EMBEDDED = "message.embedded"
    MESSAGE_EMBEDDING_FAILED = "message.embedding_failed"
    SESSION_CONSOLIDATED = "session.consolidated"
    SESSION_FORGOTTEN = "session.forgotten"
    CONSOLIDATION_REQUESTED = "consolidation.requested"
    FACT_SET = "fact.set"
    FACT_DELETED = "fact.deleted"
    MACRO_OBSERVED = "macro.observed"
    MACRO_USED = "macro.used"
    TASK_SCHEDULED = "task.scheduled"
    TASK_CHANGED = "task.changed"
    TASK_FIRED = "task.fired"
    TASK_DELETED = "task.deleted"
    PREFIX_ALLOWED = "prefix.allowed"
    PREFIX_REVOKED = "prefix.revoked"


ROLES = frozenset({"user", "assistant", "tool", "system"})
FACT_SOURCES = frozenset({"agent", "user"})
TASK_SOURCES = frozenset({"tool", "config"})
SHORT = 200
"""Length limit, in characters, of identifiers and names."""
MAX_MIN_AGE_HOURS = 24.0 * 365 * 100
"""A consolidation request's age limit beyond which nothing could ever be old enough."""
MAX_SUMMARY_SOURCES = 1000
"""Most messages one ``session.consolidated`` event may summarise."""
MAX_FACT_VALUE_CHARS = 2000

INT64_LIMIT = 2**63
"""SQLite stores signed 64-bit integers: a bigger one cannot be bound, so it is refused."""

_CONTROL = re.compile(r"[\x00-\x1f\x7f\ud800-\udfff]")
"""Characters an identifier must not hold: controls, and lone surrogates (not UTF-8)."""
_SURROGATE = re.compile(r"[\ud800-\udfff]")


@dataclass(frozen=True)
class Field:
    """One payload field: its JSON type and the limits a value must respect."""

    kind: type | tuple[type, ...]
    required: bool = True
    nullable: bool = False
    max_chars: int | None = SHORT
    choices: frozenset[str] | None = None
    low: float | None = None
    high: float | None = None
    timestamp: bool = False


@dataclass(frozen=True)
class Schema:
    version: int
    fields: Mapping[str, Field]
    needs_session: bool = False


def _opt(kind: type | tuple[type, ...], **kw: Any) -> Field:
    return Field(kind, required=False, nullable=True, **kw)


_TEXT = Field(str, max_chars=None)  # bounded by limits.max_content_bytes instead
_UNIT = Field(float, low=0.0, high=1.0)
_MESSAGE_FIELDS: dict[str, Field] = {
    "message_id": Field(str),
    "role": Field(str, choices=ROLES),
    "content": _TEXT,
    "importance": _UNIT,
    "tool_call_id": _opt(str),
    "tool_name": _opt(str),
    "tool_calls": _opt(list),
}
_TASK_FIELDS: dict[str, Field] = {
    "task_id": Field(str),
    "name": Field(str),
    "schedule": Field(str),
    "cron_expr": Field(str),
    "prompt": Field(str, max_chars=None),
    "oneshot": Field(bool),
    "trusted": Field(bool),
    "tz": Field(str),
    "source": Field(str, choices=TASK_SOURCES),
    "run_at": _opt(str, timestamp=True),
}

SCHEMAS: dict[str, Schema] = {
    EventType.MESSAGE_APPENDED: Schema(1, _MESSAGE_FIELDS, needs_session=True),
    EventType.MESSAGE_IMPORTED: Schema(
        1,
        {
            **_MESSAGE_FIELDS,
            "created_at": Field(str, max_chars=SHORT),
            "tool_calls_json": _opt(str, max_chars=None),
            "embedding_b64": _opt(str, max_chars=None),
            "embedding_json": _opt(str, max_chars=None),
            "embedding_model": _opt(str),
            "embedding_dim": _opt(int, low=1, high=8192),
            "embedding_error": _opt(str, max_chars=None),
            "consolidated_at": _opt(str),
        },
        needs_session=True,
    ),
    EventType.MESSAGE_EMBEDDED: Schema(
        1,
        {
            "message_id": Field(str),
            "model": Field(str),
            "dim": Field(int, low=1, high=8192),
            "vector_b64": Field(str, max_chars=65536),
        },
    ),
    EventType.MESSAGE_EMBEDDING_FAILED: Schema(
        1, {"message_id": Field(str), "model": Field(str), "error": Field(str, max_chars=4000)}
    ),
    EventType.SESSION_CONSOLIDATED: Schema(
        1,
        {
            "summary_id": Field(str),
            "content": _TEXT,
            "source_ids": Field(list),
            "importance": _UNIT,
            "facts": _opt(list),
        },
        needs_session=True,
    ),
    EventType.SESSION_FORGOTTEN: Schema(1, {}, needs_session=True),
    # A pass over every session, or over one when the event names a session.
    EventType.CONSOLIDATION_REQUESTED: Schema(
        1, {"min_age_hours": _opt(float, low=0.0, high=MAX_MIN_AGE_HOURS)}
    ),
    EventType.FACT_SET: Schema(
        1,
        {
            "category": Field(str),
            "key": Field(str),
            "value": Field(str, max_chars=None),
            "source": Field(str, choices=FACT_SOURCES),
            "force": Field(bool, required=False),
        },
    ),
    EventType.FACT_DELETED: Schema(
        1,
        {
            "category": Field(str),
            "key": Field(str),
            # Optional so an operator's bare deletion still works: without a source the
            # deletion is unconditional; with one, the user-fact guard of fact.set applies.
            "source": Field(str, choices=FACT_SOURCES, required=False),
            "force": Field(bool, required=False),
        },
    ),
    EventType.MACRO_OBSERVED: Schema(
        1, {"tool": Field(str), "args": Field(dict)}, needs_session=True
    ),
    EventType.MACRO_USED: Schema(1, {"macro_id": Field(int, low=1)}),
    EventType.TASK_SCHEDULED: Schema(1, _TASK_FIELDS),
    EventType.TASK_CHANGED: Schema(
        1,
        {
            "task_id": Field(str),
            "paused": Field(bool, required=False),
            **{k: Field(f.kind, required=False, nullable=f.nullable, max_chars=f.max_chars,
                        choices=f.choices, timestamp=f.timestamp)
               for k, f in _TASK_FIELDS.items() if k not in {"task_id", "source"}},
        },
    ),
    EventType.TASK_FIRED: Schema(
        1,
        {
            "task_id": Field(str),
            "fired_at": Field(str, timestamp=True),
            # the run's slot, so a late or early clock cannot make it fire twice
            "scheduled_for": _opt(str, timestamp=True),
            # the configured handler's failure; the run still counts as delivered
            "handler_error": _opt(str, max_chars=4000),
        },
    ),
    EventType.TASK_DELETED: Schema(1, {"task_id": Field(str)}),
    EventType.PREFIX_ALLOWED: Schema(1, {"prefix": Field(str, max_chars=500)}),
    EventType.PREFIX_REVOKED: Schema(1, {"prefix": Field(str, max_chars=500)}),
}

Upcaster = Callable[[dict[str, Any]], dict[str, Any]]
UPCASTERS: dict[tuple[str, int], Upcaster] = {}
"""(type, old version) -> function returning the payload in version old + 1."""


@dataclass(frozen=True)
class Event:
    id: str
    type: str
    session_id: str | None
    created_at: str
    payload: dict[str, Any] = field(default_factory=dict)
    version: int = 1

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
        return "" if _SURROGATE.search(value) else None
    if depth > 64 or not isinstance(value, (dict, list)):  # orjson stops at 255 anyway
        return None
    pairs: Any = value.items() if isinstance(value, dict) else enumerate(value)
    for key, item in pairs:
        if isinstance(key, str) and _SURROGATE.search(key):
            return f"{key!r}"  # the repr escapes the surrogate, so the message prints
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
    unknown = set(data) - {"id", "type", "v", "session_id", "created_at", "payload"}
    if unknown:
        raise InvalidEvent(f"unknown event field(s): {', '.join(sorted(unknown))}")
    etype = _string(data, "type", SHORT)
    schema = SCHEMAS.get(etype)
    if schema is None:
        raise InvalidEvent(f"unknown event type {etype!r}")
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
    check_payload(event.type, payload, limits)
    return event


def _upcast(
    etype: str, version: Any, payload: dict[str, Any], schema: Schema
) -> tuple[int, dict[str, Any]]:
    if not isinstance(version, int) or isinstance(version, bool) or version < 1:
        raise InvalidEvent(f"{etype}: v must be a positive integer, got {version!r}")
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
        raise InvalidEvent(f"{key} must be a non-empty string, got {value!r:.60}")
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
    value = data.get("created_at")
    try:
        parse_rfc3339(value, what="created_at")  # type: ignore[arg-type]  # checked inside
    except ValidationError as exc:
        raise InvalidEvent(str(exc)) from exc
    return str(value)


def check_identifier(
    what: str, value: Any, *, max_chars: int = SHORT, error: type[ValidationError] = ValidationError
) -> str:
    """Ids, session ids, names: non-empty text, bounded, with no control characters."""
    if not isinstance(value, str):
        raise error(f"{what} must be a string, got {type(value).__name__}")
    if not value.strip():
        raise error(f"{what} must not be empty")
    if len(value) > max_chars:
        raise error(f"{what} is {len(value)} characters, over the {max_chars} limit")
    bad = _CONTROL.search(value)
    if bad is not None:
        if _SURROGATE.match(bad.group()):
            raise error(f"{what} contains a lone surrogate, which is not valid UTF-8")
        raise error(f"{what} contains a control character")
    return value


def check_payload(etype: str, payload: Mapping[str, Any], limits: LimitsConfig) -> None:
    """Validate a payload against its type's schema; raises :class:`InvalidEvent`."""
    fields = SCHEMAS[etype].fields
    for name in payload:
        if name not in fields:
            unknown = sorted(set(payload) - set(fields))
            raise InvalidEvent(f"{etype}: unknown payload field(s): {', '.join(unknown)}")
    for name, spec in fields.items():
        value = payload.get(name, _MISSING)
        if value is _MISSING:
            problem = "is missing" if spec.required else None
        elif value is None:
            problem = None if spec.nullable else "must not be null"
        else:
            problem = _problem(value, spec, limits)
        if problem is not None:
            raise InvalidEvent(f"{etype}: payload.{name} {problem}")


_MISSING = object()


def _problem(value: Any, spec: Field, limits: LimitsConfig) -> str | None:
    """What is wrong with ``value`` (a phrase), or None; no strings built on the good path."""
    kind = (float, int) if spec.kind is float else spec.kind
    if not isinstance(value, kind) or (isinstance(value, bool) and spec.kind is not bool):
        return f"must be {_kind_name(spec.kind)}, got {type(value).__name__}"
    if isinstance(value, str):
        return _text_problem(value, spec, limits)
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        return _number_problem(value, spec)
    if isinstance(value, (list, dict)):
        return _structure_problem(value)
    return None


def _structure_problem(value: list[Any] | dict[str, Any]) -> str | None:
    # JSON that parses can still fail to be written back (orjson reads 1024 levels deep but
    # writes 255; a caller may hand in any Python object): find out before it is applied.
    try:
        orjson.dumps(value)
    except TypeError as exc:
        return f"cannot be stored as JSON: {exc}"
    return None


def _text_problem(value: str, spec: Field, limits: LimitsConfig) -> str | None:
    if "\x00" in value:
        return "contains a NUL character"
    if spec.max_chars is None:
        # Characters bound bytes from above by 4: only long texts need encoding to count.
        if len(value) * 4 > limits.max_content_bytes:
            size = len(value.encode("utf-8", "surrogatepass"))
            if size > limits.max_content_bytes:
                return f"is {size} bytes, over the {limits.max_content_bytes} byte limit"
    elif len(value) > spec.max_chars:
        return f"is {len(value)} characters, over the {spec.max_chars} limit"
    if spec.choices is not None and value not in spec.choices:
        return f"must be one of {', '.join(sorted(spec.choices))}"
    if spec.timestamp:
        try:
            parse_rfc3339(value, what="it")
        except ValidationError as exc:
            return str(exc).removeprefix("it ")  # "has no time zone offset: ..." etc.
    return None


def _number_problem(value: float, spec: Field) -> str | None:
    if isinstance(value, float) and not math.isfinite(value):
        return "must be a finite number"
    if isinstance(value, int) and not -INT64_LIMIT <= value < INT64_LIMIT:
        return "is out of the 64-bit integer range"
    if spec.low is not None and value < spec.low:
        return f"must be at least {spec.low}, got {value}"
    if spec.high is not None and value > spec.high:
        return f"must be at most {spec.high}, got {value}"
    return None


def _kind_name(kind: type | tuple[type, ...]) -> str:
    names = {str: "a string", float: "a number", int: "an integer", bool: "a boolean",
             list: "a list", dict: "an object"}
    kinds = kind if isinstance(kind, tuple) else (kind,)
    return " or ".join(names.get(k, k.__name__) for k in kinds)


def check_proposed_fact(value: Any) -> dict[str, str]:
    """One fact a summary proposes: ``{"category", "key", "value"}``, all non-empty text."""
    if not isinstance(value, dict):
        raise ValidationError(f"a proposed fact must be an object, got {type(value).__name__}")
    if set(value) != {"category", "key", "value"}:
        raise ValidationError(
            f"a proposed fact has exactly category, key and value, got {sorted(value)}"
        )
    fact = {k: check_identifier(f"fact {k}", value[k]) for k in ("category", "key")}
    text = value["value"]
    if not isinstance(text, str) or not text.strip() or len(text) > MAX_FACT_VALUE_CHARS:
        raise ValidationError(
            f"fact value must be non-empty text of at most {MAX_FACT_VALUE_CHARS} characters"
        )
    if "\x00" in text:
        raise ValidationError("fact value contains a NUL character")
    fact["value"] = text
    return fact
