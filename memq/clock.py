"""Time and identifiers: RFC3339 UTC timestamps and time-ordered UUIDs.

Ids are UUIDv7-style (48 bits of milliseconds, then randomness) because SQLite inserts
into a b-tree keyed by random UUIDs slow down as the table grows, while time-ordered keys
append at the right edge of the index.
"""

from __future__ import annotations

import os
import re
import threading
import time
import uuid
from datetime import UTC, datetime, timedelta, timezone

from memq.errors import ValidationError
from memq.printable import shown

_RANDOM_POOL_BYTES = 4096
_random_pool = bytearray()
_random_lock = threading.Lock()


def _random_bytes(count: int) -> bytearray:
    """``count`` bytes from the OS's random source, read 4 KB at a time: one system call per
    ~400 ids instead of one per id (the call, not the bytes, costs: ~20 us each on a busy
    machine, as much as the rest of an append)."""
    global _random_pool
    with _random_lock:
        if len(_random_pool) < count:
            _random_pool = bytearray(os.urandom(_RANDOM_POOL_BYTES))
        taken = _random_pool[-count:]
        del _random_pool[-count:]
    return taken


def _forget_random_pool() -> None:
    # A forked child (RQ forks per job) must not hand out its parent's next ids again.
    global _random_pool
    _random_pool = bytearray()


os.register_at_fork(after_in_child=_forget_random_pool)


def uuid7() -> str:
    """A new time-ordered UUID (version 7 layout) as a string."""
    ms = time.time_ns() // 1_000_000
    rand = _random_bytes(10)
    rand[0] = (rand[0] & 0x0F) | 0x70  # version 7
    rand[2] = (rand[2] & 0x3F) | 0x80  # RFC 4122 variant
    return str(uuid.UUID(bytes=ms.to_bytes(6, "big") + bytes(rand)))


def now_utc() -> datetime:
    return datetime.now(UTC)


def to_rfc3339(moment: datetime) -> str:
    """Format an aware datetime as RFC3339 in UTC with microseconds and a ``Z``.

    Always four digits of year (``strftime("%Y")`` writes year 5 as "5"), so that stored
    timestamps sort as text in time order.
    """
    if moment.tzinfo is None or moment.utcoffset() is None:
        raise ValidationError(f"datetime {moment.isoformat()} has no time zone")
    try:
        u = moment.astimezone(UTC)
    except OverflowError:
        raise ValidationError(f"datetime {moment.isoformat()} is out of range in UTC") from None
    return (f"{u.year:04d}-{u.month:02d}-{u.day:02d}T{u.hour:02d}:{u.minute:02d}:"
            f"{u.second:02d}.{u.microsecond:06d}Z")


def now_rfc3339() -> str:
    return to_rfc3339(now_utc())


MAX_RFC3339_CHARS = 40
"""Longer than any RFC3339 timestamp memq accepts (nanoseconds and an offset take 35)."""

_RFC3339 = re.compile(
    r"(\d{4})-(\d{2})-(\d{2})[Tt](\d{2}):(\d{2}):(\d{2})(?:\.(\d{1,9}))?"
    r"(?:[Zz]|([+-])(\d{2}):(\d{2}))",
    re.ASCII,  # \d is 0-9 only: int() would read other scripts' digits too
)
_NAIVE = re.compile(r"\d{4}-\d{2}-\d{2}(?:[Tt ]\d{2}:\d{2}(?::\d{2}(?:\.\d+)?)?)?", re.ASCII)
_CANONICAL = re.compile(r"\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}\.\d{6}Z", re.ASCII)


def parse_rfc3339(text: str, *, what: str = "timestamp") -> datetime:
    """Parse a strict RFC3339 date-time with an explicit offset into an aware UTC datetime.

    Strict means RFC3339's own grammar, ``YYYY-MM-DDTHH:MM:SS[.fraction](Z|±HH:MM)``:
    not the other ISO 8601 forms ``datetime.fromisoformat`` also reads (week dates, no
    separators, a space, no seconds). Fractions beyond microseconds are cut. Every error
    is a :class:`ValidationError`, including an instant beyond year 1-9999 once in UTC
    ("9999-12-31T23:00:00-05:00").
    """
    if not isinstance(text, str) or not 10 <= len(text) <= MAX_RFC3339_CHARS:
        raise ValidationError(f"{what} must be an RFC3339 string, got {shown(text):.60}")
    match = _RFC3339.fullmatch(text)
    if match is None:
        if _NAIVE.fullmatch(text):
            raise ValidationError(f"{what} has no time zone offset: {text!r}")
        raise ValidationError(f"{what} is not RFC3339: {text!r} "
                              "(expected YYYY-MM-DDTHH:MM:SS[.fraction] and Z or ±HH:MM)")
    year, month, day, hour, minute, second, fraction, sign, off_h, off_m = match.groups()
    if second == "60":
        raise ValidationError(f"{what} is a leap second, which memq cannot store: {text!r}")
    if sign and int(off_m) > 59:
        raise ValidationError(f"{what} has an offset with over 59 minutes: {text!r}")
    try:
        offset = timedelta(hours=int(off_h), minutes=int(off_m)) if sign else timedelta()
        zone = timezone(-offset if sign == "-" else offset)
        local = datetime(int(year), int(month), int(day), int(hour), int(minute), int(second),
                         int((fraction or "0").ljust(6, "0")[:6]), tzinfo=zone)
    except ValueError:
        raise ValidationError(f"{what} is not RFC3339: {text!r} (no such date or time)") from None
    try:
        return local.astimezone(UTC)
    except OverflowError:
        raise ValidationError(f"{what} is out of range (years 1-9999 in UTC): {text!r}") from None


def normalize_rfc3339(value: datetime | str, *, what: str = "created_at") -> str:
    """Accept an aware datetime or an RFC3339 string; return canonical RFC3339 UTC."""
    if isinstance(value, datetime):
        return to_rfc3339(value)
    if isinstance(value, str) and _CANONICAL.fullmatch(value):
        # Already memq's own form (the usual case): only the ranges need checking.
        try:
            datetime.fromisoformat(value)
            return value
        except ValueError:
            pass  # parse_rfc3339 names the problem
    return to_rfc3339(parse_rfc3339(value, what=what))


FUTURE_TOLERANCE = timedelta(minutes=15)
"""How far ahead of the receiver's clock a producer's time may be: hosts' clocks differ by
seconds; a time further ahead is a mistake or a way to stay a session's newest turn, and
out of retention's reach, forever."""


def future_problem(created_at: str, what: str = "created_at") -> str | None:
    """Why ``created_at`` is too far in the future, or None. memq's own form (canonical
    UTC, which sorts as text in time order) is compared as text: the writer asks this of
    every event, and parsing each would cost more than the rest of its checks."""
    limit = _future_limit()
    if _CANONICAL.fullmatch(created_at):
        if created_at <= limit:
            return None
    elif parse_rfc3339(created_at) <= parse_rfc3339(limit):
        return None
    return (f"{what} {created_at} is ahead of this clock by more than "
            f"{int(FUTURE_TOLERANCE.total_seconds() // 60)} minutes")


_limit: tuple[float, str] = (0.0, "")


def _future_limit() -> str:
    """Now plus :data:`FUTURE_TOLERANCE`, in memq's form; made again once a second (a
    limit a second old changes nothing against a quarter of an hour)."""
    global _limit
    made, text = _limit
    if time.monotonic() - made > 1.0:
        _limit = (time.monotonic(), to_rfc3339(datetime.now(UTC) + FUTURE_TOLERANCE))
        text = _limit[1]
    return text
