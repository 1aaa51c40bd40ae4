"""Time and identifiers: RFC3339 UTC timestamps and time-ordered UUIDs.

Ids are UUIDv7-style (48 bits of milliseconds, then randomness) because SQLite inserts
into a b-tree keyed by random UUIDs slow down as the table grows, while time-ordered keys
append at the right edge of the index.
"""

from __future__ import annotations

import os
import time
import uuid
from datetime import UTC, datetime

from memq.errors import ValidationError


def uuid7() -> str:
    """A new time-ordered UUID (version 7 layout) as a string."""
    ms = time.time_ns() // 1_000_000
    rand = bytearray(os.urandom(10))
    rand[0] = (rand[0] & 0x0F) | 0x70  # version 7
    rand[2] = (rand[2] & 0x3F) | 0x80  # RFC 4122 variant
    return str(uuid.UUID(bytes=ms.to_bytes(6, "big") + bytes(rand)))


def now_utc() -> datetime:
    return datetime.now(UTC)


def to_rfc3339(moment: datetime) -> str:
    """Format an aware datetime as RFC3339 in UTC with microseconds and a ``Z``."""
    if moment.tzinfo is None or moment.utcoffset() is None:
        raise ValidationError(f"datetime {moment.isoformat()} has no time zone")
    return moment.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def now_rfc3339() -> str:
    return to_rfc3339(now_utc())


def parse_rfc3339(text: str, *, what: str = "timestamp") -> datetime:
    """Parse an RFC3339 string with an explicit offset; naive or malformed text is refused."""
    if not isinstance(text, str) or not 10 <= len(text) <= 40:
        raise ValidationError(f"{what} must be an RFC3339 string, got {text!r:.60}")
    if not (text.isascii() and text.isprintable()):
        # datetime.fromisoformat stops reading at a NUL, so it would accept
        # "2026-01-01T00:00:00Z\x00<anything>" as that instant.
        raise ValidationError(f"{what} is not RFC3339: {text!r}")
    try:
        moment = datetime.fromisoformat(text)
    except ValueError as exc:
        raise ValidationError(f"{what} is not RFC3339: {text!r}") from exc
    if moment.tzinfo is None:
        raise ValidationError(f"{what} has no time zone offset: {text!r}")
    return moment.astimezone(UTC)


def normalize_rfc3339(value: datetime | str, *, what: str = "created_at") -> str:
    """Accept an aware datetime or an RFC3339 string; return canonical RFC3339 UTC."""
    if isinstance(value, datetime):
        return to_rfc3339(value)
    return to_rfc3339(parse_rfc3339(value, what=what))
