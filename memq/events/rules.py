"""Rules of single payload fields beyond their type and size (``Field.check``).

Each rule returns the problem as a phrase that follows the field's name ("must ...",
"is ...", "contains ..."), or None. They run before an event is applied, so a value the
read side could not use (a ``tool_calls_json`` that is not JSON, a cron expression that
never fires) is refused with its reason instead of being stored.
"""

from __future__ import annotations

import re
from typing import Any

import orjson

from memq import tenants
from memq.approvals import normalize_prefix
from memq.errors import ValidationError
from memq.events.fields import check_identifier, check_proposed_fact
from memq.schedule import validate_cron, validate_timezone
from memq.webhooks import url_problem

MAX_SUMMARY_SOURCES = 1000
"""Most messages one ``session.consolidated`` event may summarise."""

TASK_ID = re.compile(r"[A-Za-z0-9_-]{1,100}")
"""Task ids become part of RQ job ids and Redis keys, which allow these characters."""


def task_id(value: str) -> str | None:
    if TASK_ID.fullmatch(value):
        return None
    return "must be 1-100 letters, digits, '-' or '_'"


MAX_NAMESPACE_DEPTH = 20
"""Most labels a document's namespace may have."""


def namespace(value: list[Any]) -> str | None:
    """A document's namespace: 1 to 20 labels, each an identifier without a '.'."""
    if not 1 <= len(value) <= MAX_NAMESPACE_DEPTH:
        return f"must have 1 to {MAX_NAMESPACE_DEPTH} labels, got {len(value)}"
    for label in value:
        problem = _identifier_problem(label)
        if problem is not None:
            return f"holds a label that {problem}"
        if "." in label:
            return f"holds a label with a '.': {label!r:.60}"
    return None


def json_list(value: str) -> str | None:
    """Text holding a JSON list (``tool_calls_json`` of an imported message)."""
    try:
        parsed = orjson.loads(value)
    except orjson.JSONDecodeError:
        return "is not valid JSON"
    if not isinstance(parsed, list):
        return f"must hold a JSON list, got {type(parsed).__name__}"
    return None


def source_ids(value: list[Any]) -> str | None:
    return _distinct_ids(value, MAX_SUMMARY_SOURCES, ("message", "messages", "an id"))


MAX_RETENTION_SESSIONS = 1000
"""Sessions one ``retention.applied`` event may expire messages in (a pass sends more)."""


def retention_sessions(value: list[Any]) -> str | None:
    return _distinct_ids(value, MAX_RETENTION_SESSIONS,
                         ("session", "sessions", "a session id"))


def _distinct_ids(value: list[Any], limit: int, names: tuple[str, str, str]) -> str | None:
    """A non-empty list of at most ``limit`` distinct identifiers; ``names``: what one is,
    several are, and one id is called, for the problem found."""
    one, several, an_id = names
    if not value:
        return "is empty"
    if len(value) > limit:
        return f"lists {len(value)} {several}, over the {limit} limit"
    for item in value:
        problem = _identifier_problem(item)
        if problem is not None:
            return f"holds {an_id} that {problem}"
    if len(set(value)) != len(value):
        return f"lists a {one} twice"
    return None


MAX_DROPPED = 1000
"""Rejected events one ``rejected.dropped`` may drop."""


def rejected_ids(value: list[Any]) -> str | None:
    """The rows of ``rejected_events`` to drop: 1 to 1000 distinct positive integers."""
    if not value:
        return "is empty"
    if len(value) > MAX_DROPPED:
        return f"lists {len(value)} rejected events, over the {MAX_DROPPED} limit"
    if not all(type(item) is int and 0 < item < 2**63 for item in value):
        return "holds an id that is not a positive integer"
    if len(set(value)) != len(value):
        return "lists a rejected event twice"
    return None


MAX_GRANTED = 1000
"""Most users (or agents) one key may name."""

RIGHTS = frozenset({"read", "write", "forget", "delegate"})


def granted_ids(value: list[Any]) -> str | None:
    """The users or agents a key names: 1 to 1000 distinct identifiers, each a name inside
    the key's tenant (never another tenant's stored form)."""
    if any(isinstance(item, str) and tenants.SEPARATOR in item for item in value):
        return "holds an id with a control character"
    return _distinct_ids(value, MAX_GRANTED, ("user or agent", "users or agents", "an id"))


def tenant(value: str) -> str | None:
    try:
        tenants.check_name(value)
    except ValidationError as exc:
        return f"is not a tenant's name: {exc}"
    return None


def rights(value: list[Any]) -> str | None:
    unknown = [r for r in value if r not in RIGHTS]
    if unknown or len(set(value)) != len(value):
        return f"must be distinct rights among {', '.join(sorted(RIGHTS))}"
    return None


KEY_ID = re.compile(r"[a-f0-9]{16}")


def key_id(value: str) -> str | None:
    return None if KEY_ID.fullmatch(value) else "must be 16 hexadecimal digits"


SHA256 = re.compile(r"[a-f0-9]{64}")


def sha256(value: str) -> str | None:
    return None if SHA256.fullmatch(value) else "must be a SHA-256 digest in hexadecimal"


def proposed_facts(value: list[Any]) -> str | None:
    for fact in value:
        try:
            check_proposed_fact(fact)
        except ValidationError as exc:
            return f"holds a bad fact: {exc}"
    return None


def cron(value: str) -> str | None:
    return _refusal(validate_cron, value)


def timezone(value: str) -> str | None:
    return _refusal(validate_timezone, value)


def prefix(value: str) -> str | None:
    problem = _refusal(normalize_prefix, value)
    return None if problem is None else problem.replace("is refused: prefix ", "", 1)


def revoked_prefix(value: str) -> str | None:
    """As :func:`prefix`, but an approval stored before RUNNERS existed may be revoked."""
    problem = _refusal(lambda v: normalize_prefix(v, runners_ok=True), value)
    return None if problem is None else problem.replace("is refused: prefix ", "", 1)


def _refusal(validate: Any, value: str) -> str | None:
    try:
        validate(value)
    except ValidationError as exc:
        return f"is refused: {exc}"
    return None


def _identifier_problem(value: Any) -> str | None:
    try:
        check_identifier("it", value)
    except ValidationError as exc:
        return str(exc).removeprefix("it ")
    return None


def webhook_url(value: str) -> str | None:
    return url_problem(value)


def type_patterns(value: list[Any]) -> str | None:
    """Event types or shell patterns (``fact.*``): 1 to 50, each 1-100 characters."""
    if not 1 <= len(value) <= 50 or not all(
            isinstance(t, str) and 0 < len(t) <= 100 and t.isprintable() for t in value):
        return "must list 1 to 50 event types or patterns such as 'fact.*'"
    return None


WEBHOOK_SECRET = re.compile(r"whsec_[A-Za-z0-9_-]{43}")


def webhook_secret(value: str) -> str | None:
    return None if WEBHOOK_SECRET.fullmatch(value) else "must be a secret memq made"
