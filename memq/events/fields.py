"""Field-level validation: the rules a payload value or an identifier must respect.

Pure (no storage, no Redis): producers and the writer validate with the same code.
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

import orjson

from memq import tenants
from memq.clock import normalize_rfc3339, parse_rfc3339
from memq.config import LimitsConfig
from memq.errors import InvalidEvent, ValidationError
from memq.printable import shown

SHORT = 200
"""Length limit, in characters, of identifiers and names."""
MAX_FACT_VALUE_CHARS = 2000

INT64_LIMIT = 2**63
"""SQLite stores signed 64-bit integers: a bigger one cannot be bound, so it is refused."""

_CONTROL = re.compile(r"[\x00-\x1f\x7f-\x9f\ud800-\udfff]")
"""Characters an identifier must not hold: C0 and C1 controls (terminal escapes start
with ESC or CSI), and lone surrogates (not UTF-8)."""
_SEPARATOR_CONTROLS = re.compile(r"[\x1c-\x1f]")
SURROGATE = re.compile(r"[\ud800-\udfff]")


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
    """Strict RFC3339; the writer stores it normalised to UTC (``...Z``)."""
    identifier: bool = False
    """An id or a name: not blank, and no control character (it is shown and logged)."""
    check: Callable[[Any], str | None] | None = None
    """A rule of the field's own, run once the type is right: the problem, or None."""


@dataclass(frozen=True)
class Schema:
    version: int
    fields: Mapping[str, Field]
    needs_session: bool = False


def check_identifier(
    what: str, value: Any, *, max_chars: int = SHORT, error: type[ValidationError] = ValidationError
) -> str:
    """Ids, session ids, names: non-empty text, bounded, with no control characters (but
    the separator of a tenant's stored form, :mod:`memq.tenants`, whose id part is held to
    the same rules)."""
    if not isinstance(value, str):
        raise error(f"{what} must be a string, got {type(value).__name__}")
    tenant, name = tenants.split(value)
    if _blank(name) and not (tenant != tenants.DEFAULT and name == ""):
        raise error(f"{what} must not be empty")
    if len(name) > max_chars:
        raise error(f"{what} is {len(name)} characters, over the {max_chars} limit")
    check_characters(what, name, error=error)
    return value


def check_characters(what: str, text: str, *,
                     error: type[ValidationError] = ValidationError) -> None:
    """``error`` if ``text`` holds a control character or a lone surrogate: what no id or
    name may hold, checked before anything reads the database with it (SQLite cannot
    take a lone surrogate, which is not UTF-8)."""
    bad = _CONTROL.search(text)
    if bad is not None:
        if SURROGATE.match(bad.group()):
            raise error(f"{what} contains a lone surrogate, which is not valid UTF-8")
        raise error(f"{what} contains a control character")


def _blank(name: str) -> bool:
    """Nothing but spaces, tabs and line ends. (str.strip() also takes U+001C-U+001F for
    whitespace: an id of the tenant separator alone was "empty" rather than holding a
    control character.)"""
    return not name.strip() and _SEPARATOR_CONTROLS.search(name) is None


def check_query(query: Any, max_bytes: int) -> str | None:
    """``query`` if a search may embed and match it (None: no query); ValidationError
    naming what is wrong otherwise. A lone surrogate is refused here: the tokenizer, and
    SQLite, cannot take it."""
    if query is None:
        return None
    if not isinstance(query, str):
        raise ValidationError(f"query must be a string or None, got {type(query).__name__}")
    if not query.strip():
        raise ValidationError("query must not be blank; pass None to skip the semantic branch")
    try:
        size = len(query.encode("utf-8"))
    except UnicodeEncodeError:
        raise ValidationError(
            "query contains a lone surrogate, which is not valid UTF-8") from None
    if size > max_bytes:
        raise ValidationError(f"query is {size} bytes, over the {max_bytes} byte limit")
    return query


def check_count(what: str, value: Any, low: int, high: int) -> int:
    """A count a caller sends (a page's size, an offset): a whole number, not a bool, from
    ``low`` to ``high``; a float would reach SQLite's LIMIT as a type it refuses."""
    if not isinstance(value, int) or isinstance(value, bool) or not low <= value <= high:
        raise ValidationError(f"{what} must be an integer from {low} to {high}, got "
                              f"{shown(value):.60}")
    return value


def check_fields(
    etype: str, fields: Mapping[str, Field], payload: Mapping[str, Any], limits: LimitsConfig
) -> None:
    """Validate a payload against ``fields``; raises :class:`InvalidEvent` naming the field."""
    for name in payload:
        if name not in fields:
            unknown = sorted(set(payload) - set(fields))
            raise InvalidEvent(f"{etype}: unknown payload field(s): {', '.join(unknown)}")
    for name, spec in fields.items():
        value = payload.get(name, _MISSING)
        if value is _MISSING:
            problem = "is missing" if spec.required else None
        elif value is None and spec.nullable:
            problem = None
        else:
            problem = _problem(value, spec, limits)
        if problem is not None:
            raise InvalidEvent(f"{etype}: payload.{name} {problem}")


_MISSING = object()


def normalized_timestamps(fields: Mapping[str, Field], payload: dict[str, Any]) -> dict[str, Any]:
    """``payload`` with its (checked) timestamp fields in canonical UTC form."""
    changed: dict[str, Any] | None = None
    for name, spec in fields.items():
        value = payload.get(name)
        if spec.timestamp and isinstance(value, str):
            canonical = normalize_rfc3339(value, what=name)
            if canonical != value:
                changed = changed if changed is not None else dict(payload)
                changed[name] = canonical
    return payload if changed is None else changed


def _problem(value: Any, spec: Field, limits: LimitsConfig) -> str | None:
    """What is wrong with ``value`` (a phrase), or None; no strings built on the good path."""
    if spec.choices is not None and not (isinstance(value, str) and value in spec.choices):
        return f"must be one of {', '.join(sorted(spec.choices))}, got {_brief(value)}"
    kind = (float, int) if spec.kind is float else spec.kind
    if not isinstance(value, kind) or (isinstance(value, bool) and spec.kind is not bool):
        return f"must be {_kind_name(spec.kind)}, got {type(value).__name__}"
    problem: str | None = None
    if isinstance(value, str):
        problem = _text_problem(value, spec, limits)
    elif isinstance(value, (int, float)) and not isinstance(value, bool):
        problem = _number_problem(value, spec)
    elif isinstance(value, (list, dict)):
        problem = _structure_problem(value)
    if problem is None and spec.check is not None:
        problem = spec.check(value)
    return problem


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
    # Characters bound bytes from above by 4: only long texts need encoding to count.
    if spec.max_chars is None and len(value) * 4 > limits.max_content_bytes:
        size = len(value.encode("utf-8", "surrogatepass"))
        if size > limits.max_content_bytes:
            return f"is {size} bytes, over the {limits.max_content_bytes} byte limit"
    if spec.identifier:
        try:
            check_identifier("it", value, max_chars=spec.max_chars or len(value))
        except ValidationError as exc:
            return str(exc).removeprefix("it ")
    elif spec.max_chars is not None and len(value) > spec.max_chars:
        return f"is {len(value)} characters, over the {spec.max_chars} limit"
    if spec.timestamp:
        try:
            parse_rfc3339(value, what="it")
        except ValidationError as exc:
            return str(exc).removeprefix("it ")  # "has no time zone offset: ..." etc.
    return None


def _number_problem(value: float, spec: Field) -> str | None:
    # Python compares a huge int with a float bound exactly, so the bounds come first and
    # name the range the caller missed; NaN fails every comparison, hence "not low <= ...".
    if spec.low is not None and spec.high is not None:
        if not spec.low <= value <= spec.high:
            return f"must be between {spec.low} and {spec.high}, got {_shown(value)}"
    elif spec.low is not None and value < spec.low:
        return f"must be at least {spec.low}, got {_shown(value)}"
    elif spec.high is not None and value > spec.high:
        return f"must be at most {spec.high}, got {_shown(value)}"
    if isinstance(value, float) and not math.isfinite(value):
        return "must be a finite number"
    if isinstance(value, int) and not -INT64_LIMIT <= value < INT64_LIMIT:
        return "is out of the 64-bit integer range"
    return None


def _brief(value: Any) -> str:
    """Any value as an error message shows it, cheaply: hostile input can be huge."""
    if isinstance(value, str):
        return repr(value[:60])
    if value is None or isinstance(value, (bool, float, int)):
        return _shown(value)
    return type(value).__name__


def _shown(value: Any) -> str:
    """A number as an error message shows it; a huge int by its size (its repr may not
    even be computable: Python refuses to print ints of more than 4,300 digits)."""
    if isinstance(value, int) and value.bit_length() > 64:
        return f"an integer of {int(value.bit_length() * math.log10(2)) + 1} digits"
    return repr(value)


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
