"""Natural-language schedules: text -> a 5-field cron expression, or a one-shot instant.

Pure functions, no I/O. The text is lower-cased and its whitespace collapsed first, so
matching ignores case and extra spaces. Forms, tried in this order:

    cron      "m h dom mon dow": each field "*", N, N-M, */S, N-M/S or a comma list of
              those; JAN..DEC and SUN..SAT in their fields, 7 is also Sunday
    keyword   hourly | daily | weekly | monthly   (a leading "@" is allowed)
    interval  every [N] (m|min|mins|minute|minutes|h|hr|hrs|hour|hours)
              -> "*/N * * * *" or "0 */N * * *"; 1 <= N <= 59 (minutes), 23 (hours)
    relative  in N UNIT [[,|and] N UNIT]...   UNIT: minutes, hours, days, weeks (and the
              usual abbreviations); "an hour" also works             -> one-shot
    dated     [on] (today | tomorrow | MONTH D[th][,] [YYYY] | [the] D[th] [of] MONTH [YYYY]
              | YYYY-MM-DD) [[at] TIME]; midnight when no time is given -> one-shot
    weekly    [DAYS] [at] TIMES -- DAYS: every day | daily | every weekday | weekdays |
              weekends | a list of day names joined by "," / "and" ("every mon and fri",
              "on tuesdays"); either part may be left out (no DAYS: every day; no
              TIMES: midnight). Day names always recur: there is no "next monday".
    TIME      9am | 9:30pm | 12am | 12pm | noon | midnight | 18:30 | 8:30 (= 08:30);
              a bare hour ("at 9" = 09:00) only right after "at" or a date

Cron steps restart at the top of each hour (or day), so an N that does not divide 60
(or 24) leaves one short gap: "every 7 minutes" fires at :56 and again at :00.

Several times become one expression only when they form a grid -- cron fires at every
listed minute of every listed hour: "6am, 12pm and 6pm" -> "0 6,12,18 * * *", but
"6:30 and 7:00" cannot be one expression and is refused.

One-shots: ``run_at`` is the aware UTC instant, ``cron_expr`` that instant's local
minute, hour, day and month. A date without a year that is already past means next
year; an explicit date in the past is an error. Days and weeks in "in ..." move the
local calendar date (same wall-clock time); minutes and hours are elapsed time.

DST: wall-clock times are in the task's time zone ``tz``. A time that does not exist
(spring forward: 2:30 in New York on the second Sunday of March) moves forward by the
length of the gap, to 3:30. A time that happens twice (fall back) means its first
occurrence. Both are PEP 495's ``fold=0`` reading of a local time.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from datetime import UTC, date, datetime, timedelta
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

from memq.errors import ScheduleError

EXAMPLES = (
    "every 15 minutes", "daily at 9am", "weekdays at 8:30", "every monday and friday at 3pm",
    "in 2 hours", "tomorrow at 9am", "on March 5 at 3pm", "0 9 * * 1-5",
)
_MAX_TEXT = 200  # real schedules are short; a cap keeps the regexes' cost bounded
_KEYWORDS = {"hourly": "0 * * * *", "daily": "0 0 * * *", "weekly": "0 0 * * 0",
             "monthly": "0 0 1 * *"}
_MONTH_WORDS = ("jan january", "feb february", "mar march", "apr april", "may", "jun june",
                "jul july", "aug august", "sep sept september", "oct october",
                "nov november", "dec december")
_DAY_WORDS = ("sun sunday", "mon monday", "tue tues tuesday", "wed weds wednesday",
              "thu thur thurs thursday", "fri friday", "sat saturday")
_MONTHS = {w: i for i, ws in enumerate(_MONTH_WORDS, 1) for w in ws.split()}
_DAYS = {w: i for i, ws in enumerate(_DAY_WORDS) for w in ws.split()}
_DAYS |= {w + "s": i for w, i in _DAYS.items() if w.endswith("day")}  # "on mondays"
_MAX_DAY = dict(enumerate((31, 29, 31, 30, 31, 30, 31, 31, 30, 31, 30, 31), 1))
_UNIT_WORDS = {"minutes": "m min mins minute", "hours": "h hr hrs hour", "days": "d day",
               "weeks": "w wk wks week"}
_UNITS = {w: unit for unit, ws in _UNIT_WORDS.items() for w in (*ws.split(), unit)}

_LIST_SPLIT = re.compile(r"\s*,\s*(?:and\s+)?|\s+and\s+|\s*&\s*")
_TIME_RE = re.compile(r"(?P<h>\d{1,2})(?::(?P<m>\d{2}))?\s*(?:(?P<ampm>[ap])\.?m\.?)?")
_INTERVAL_RE = re.compile(r"every\s+(?:(\d+)\s*)?(m|mins?|minutes?|h|hrs?|hours?)")
_ORD = r"(?:st|nd|rd|th)?"
_MON = "|".join(sorted(_MONTHS, key=len, reverse=True))  # longest first: "march" not "mar"
_DATE_RE = re.compile(
    r"(?:on\s+)?(?:(?P<rel>today|tomorrow)"
    r"|(?P<iy>\d{4})-(?P<im>\d{1,2})-(?P<id>\d{1,2})"
    rf"|(?P<mon1>{_MON})\.?\s+(?P<d1>\d{{1,2}}){_ORD}(?:,?\s+(?P<y1>\d{{4}}))?"
    rf"|(?:the\s+)?(?P<d2>\d{{1,2}}){_ORD}\s+(?:of\s+)?(?P<mon2>{_MON})(?:,?\s+(?P<y2>\d{{4}}))?)"
    r"(?:,?\s+(?:at\s+)?(?P<time>.+))?")


@dataclass(frozen=True)
class ParsedSchedule:
    """What a schedule text means; see the module docstring."""

    cron_expr: str  # 5-field cron in the task's local time zone
    is_oneshot: bool
    run_at: datetime | None  # one-shots: aware UTC instant; None for recurring


def parse_schedule(text: str, *, now: datetime, tz: str = "UTC") -> ParsedSchedule:
    """Turn schedule text into cron (see the module docstring for the grammar)."""
    if now.tzinfo is None or now.utcoffset() is None:
        raise ScheduleError(f"now must be timezone-aware, got {now.isoformat()}")
    zone = validate_timezone(tz)
    norm = " ".join(text.lower().split())
    if len(norm) > _MAX_TEXT:
        raise ScheduleError(f"schedule text is longer than {_MAX_TEXT} characters")
    cron = _parse_recurring(norm)
    if cron is not None:
        return ParsedSchedule(cron, False, None)
    try:
        run_at = _parse_relative(norm, now, zone) or _parse_dated(norm, now, zone)
        if run_at is None:
            raise ScheduleError(f"cannot understand schedule {text!r}; try e.g. "
                                + "; ".join(repr(e) for e in EXAMPLES))
        local = run_at.astimezone(zone)
    except OverflowError:
        # "in 99999999999999 minutes", or a date near year 9999 in a far-off zone: an
        # instant that a datetime (years 1-9999) cannot hold, here or in UTC.
        raise ScheduleError(f"{text!r} is beyond the year 9999 in {tz}") from None
    return ParsedSchedule(f"{local.minute} {local.hour} {local.day} {local.month} *",
                          True, run_at)


def validate_timezone(tz: str) -> ZoneInfo:
    """The ZoneInfo for an IANA name; ScheduleError naming ``tz`` otherwise."""
    try:
        return ZoneInfo(tz)
    except (ZoneInfoNotFoundError, ValueError, OSError, TypeError):
        # OSError: a directory such as "America"; ValueError: absolute or ".." paths
        raise ScheduleError(
            f"unknown time zone {tz!r}; use an IANA name such as 'Europe/Berlin'") from None


# -- cron ----------------------------------------------------------------------------

@dataclass(frozen=True)
class _Field:
    name: str
    low: int
    high: int
    names: dict[str, int]


_FIELDS = (
    _Field("minute", 0, 59, {}), _Field("hour", 0, 23, {}), _Field("day-of-month", 1, 31, {}),
    _Field("month", 1, 12, {w: i for w, i in _MONTHS.items() if len(w) == 3}),
    _Field("day-of-week", 0, 7, {w: i for w, i in _DAYS.items() if len(w) == 3}),
)


def validate_cron(expr: str) -> str:
    """Check a 5-field cron expression field by field; return it with names as numbers."""
    parts = expr.lower().split()
    if len(parts) != 5:
        raise ScheduleError(f"cron expression {expr!r} has {len(parts)} fields, expected 5:"
                            " minute hour day-of-month month day-of-week")
    fields: list[tuple[str, set[int]]] = []
    for field, part in zip(_FIELDS, parts, strict=True):
        try:
            fields.append(_cron_field(field, part))
        except ValueError as exc:
            raise ScheduleError(
                f"invalid {field.name} field {part!r} in cron {expr!r}: {exc}") from None
    (_, days), (_, months) = fields[2], fields[3]
    # Vixie cron ORs day-of-month with day-of-week, so only a lone dom can be impossible
    if parts[4] == "*" and not any(d <= _MAX_DAY[m] for d in days for m in months):
        raise ScheduleError(f"day-of-month {parts[2]!r} never occurs in month {parts[3]!r}"
                            f" (cron {expr!r})")
    return " ".join(text for text, _ in fields)


def _cron_field(field: _Field, text: str) -> tuple[str, set[int]]:
    items: list[str] = []
    values: set[int] = set()
    for item in text.split(","):
        base, slash, step_text = item.partition("/")
        if base == "*":
            low, high = field.low, field.high
        else:
            first, dash, last = base.partition("-")
            low = _cron_value(field, first)
            high = _cron_value(field, last, range_end=True) if dash else low
            if low > high:
                raise ValueError(f"range {base!r} runs backwards")
        step_field = _Field("step", 1, field.high - field.low, {})
        step = _cron_value(step_field, step_text) if slash else 1
        if slash and base != "*" and low == high:
            raise ValueError(f"step {item!r} needs '*' or a range before '/'")
        norm = "*" if base == "*" else f"{low}-{high}" if low != high else str(low)
        items.append(norm + (f"/{step}" if slash else ""))
        values.update(range(low, high + 1, step))
    return ",".join(items), values


def _cron_value(field: _Field, text: str, *, range_end: bool = False) -> int:
    if text in field.names:
        sunday_end = range_end and field.high == 7 and field.names[text] == 0
        return 7 if sunday_end else field.names[text]  # "fri-sun" must mean 5-7, not 5-0
    if not text.isdigit():
        raise ValueError(f"{text!r} is not a number" + (" or name" if field.names else ""))
    if not field.low <= int(text) <= field.high:
        raise ValueError(f"{field.name} {int(text)} is out of range {field.low}-{field.high}")
    return int(text)


# -- recurring ---------------------------------------------------------------------------

def _parse_recurring(text: str) -> str | None:
    words = text.split(" ")
    # names are only legal in the last two cron fields, so "5 march 2027 at 3pm" is no cron
    looks_cron = "*" in text or all(re.fullmatch(r"[\d/,-]+", w) for w in words[:2])
    if len(words) >= 3 and looks_cron and not any(":" in w for w in words):
        return validate_cron(text)
    if text.removeprefix("@") in _KEYWORDS:
        return _KEYWORDS[text.removeprefix("@")]
    return _parse_interval(text) or _parse_weekly(text)


def _parse_interval(text: str) -> str | None:
    match = _INTERVAL_RE.fullmatch(text)
    if match is None:
        return None
    count, hours = int(match[1] or 1), match[2].startswith("h")
    limit, unit = (24, "hours") if hours else (60, "minutes")
    if not 0 < count < limit:
        hint = "'daily'" if hours else "'every hour' or 'every N hours'"
        raise ScheduleError(f"{text!r}: N must be 1-{limit - 1} {unit}; use {hint} instead")
    step = "*" if count == 1 else f"*/{count}"
    return f"0 {step} * * *" if hours else f"{step} * * * *"


def _parse_weekly(text: str) -> str | None:
    dow = _parse_days(text)
    if dow is not None:
        return f"0 0 * * {dow}"
    words = text.split(" ")
    # try every split into a days part and a times part, in either order, so that
    # "every monday at 9am", "at 3pm on weekdays", "9am daily" and "noon" all parse
    for cut in range(len(words)):
        head, tail = " ".join(words[:cut]), " ".join(words[cut:])
        cron = _days_and_times(head, tail) or _days_and_times(tail, head)
        if cron is not None:
            return cron
    return None


def _days_and_times(days: str, times: str) -> str | None:
    dow = _parse_days(days) if days else "*"
    if dow is None or not times:
        return None
    # "at 9" is 09:00, but a bare number without "at" is too ambiguous to guess at
    bare_ok = times.startswith("at ")
    parsed = _parse_times(times.removeprefix("at "), bare_ok=bare_ok)
    return None if parsed is None else _grid_cron(parsed, dow)


def _parse_days(text: str) -> str | None:
    """The day-of-week cron field for a phrase like "every mon and fri", else None."""
    if text in ("daily", "every day", "each day"):
        return "*"
    words = re.sub(r"^(?:every|each|on)\s+", "", text)
    if words in ("weekday", "weekdays"):
        return "1-5"
    if words in ("weekend", "weekends"):
        return "0,6"
    days = [_DAYS.get(word) for word in _LIST_SPLIT.split(words)]
    if any(day is None for day in days):
        return None
    return ",".join(str(day) for day in sorted({d for d in days if d is not None}))


def _parse_times(text: str, *, bare_ok: bool) -> list[tuple[int, int]] | None:
    times = [_parse_time(item, bare_ok=bare_ok) for item in _LIST_SPLIT.split(text)]
    return None if any(t is None for t in times) else [t for t in times if t is not None]


def _parse_time(text: str, *, bare_ok: bool) -> tuple[int, int] | None:
    """(hour, minute); None if text is not shaped like a time, an error if it is one badly."""
    if text in ("noon", "midday", "midnight"):
        return (0, 0) if text == "midnight" else (12, 0)
    match = _TIME_RE.fullmatch(text)
    if match is None or not (bare_ok or match["m"] or match["ampm"]):
        return None
    hour, minute = int(match["h"]), int(match["m"] or 0)
    if minute > 59:
        raise ScheduleError(f"minute {minute} in {text!r} is out of range 0-59")
    if match["ampm"]:
        if not 1 <= hour <= 12:
            raise ScheduleError(f"hour {hour} in {text!r} is not valid with am/pm; use 1-12"
                                " or a 24-hour time such as 13:00")
        hour = hour % 12 + (12 if match["ampm"] == "p" else 0)
    elif hour > 23:
        raise ScheduleError(f"hour {hour} in {text!r} is out of range 0-23")
    return hour, minute


def _grid_cron(times: list[tuple[int, int]], dow: str) -> str:
    hours, minutes = sorted({h for h, _ in times}), sorted({m for _, m in times})
    if len(set(times)) != len(hours) * len(minutes):
        shown = ", ".join(f"{h:02d}:{m:02d}" for h, m in sorted(set(times)))
        raise ScheduleError(
            f"one cron expression cannot express the times {shown}: cron runs every listed"
            " minute at every listed hour; create one schedule per distinct minute")
    return f"{','.join(map(str, minutes))} {','.join(map(str, hours))} * * {dow}"


# -- one-shots ---------------------------------------------------------------------------

def _local_instant(wall: datetime, zone: ZoneInfo) -> datetime:
    # fold=0 reads a skipped time with the offset before the gap (so it moves forward by
    # the gap) and a repeated time as its first occurrence -- the documented DST rule
    return wall.replace(tzinfo=zone, fold=0).astimezone(UTC)


def _parse_relative(text: str, now: datetime, zone: ZoneInfo) -> datetime | None:
    if not text.startswith("in "):
        return None
    # tokens, not one big regex: nested repeats over letters would backtrack exponentially
    tokens = [t for t in re.findall(r"\d+|[a-z]+|\S", text[3:]) if t not in (",", "and")]
    pairs = list(zip(tokens[::2], tokens[1::2], strict=False))
    if not tokens or len(tokens) % 2 or any(not n.isdigit() and n not in ("a", "an")
                                            for n, _ in pairs):
        return None
    totals = {"minutes": 0, "hours": 0, "days": 0, "weeks": 0}
    for count, unit in pairs:
        if unit not in _UNITS:
            raise ScheduleError(f"unknown time unit {unit!r} in {text!r}; use minutes, hours,"
                                " days or weeks (schedules have minute precision)")
        totals[_UNITS[unit]] += 1 if count in ("a", "an") else int(count)
    if not any(totals.values()):
        raise ScheduleError(f"{text!r} is not in the future")
    moved = now.astimezone(UTC)
    if days := totals["days"] + 7 * totals["weeks"]:
        wall = now.astimezone(zone).replace(tzinfo=None) + timedelta(days=days)
        moved = _local_instant(wall, zone)
    return moved + timedelta(hours=totals["hours"], minutes=totals["minutes"])


def _parse_dated(text: str, now: datetime, zone: ZoneInfo) -> datetime | None:
    match = _DATE_RE.fullmatch(text)
    if match is None:
        return None
    times = _parse_times(match["time"], bare_ok=True) if match["time"] else [(0, 0)]
    if times is None:
        return None
    if len(times) != 1:
        raise ScheduleError(f"{text!r}: a one-shot runs once, so give a single time")
    (hour, minute), today = times[0], now.astimezone(zone).date()
    for day in _candidate_dates(match, today):
        run_at = _local_instant(datetime(day.year, day.month, day.day, hour, minute), zone)
        if run_at > now:
            return run_at
    raise ScheduleError(f"{text!r} is in the past (now is {now.astimezone(zone):%Y-%m-%d %H:%M}"
                        f" in {zone.key})")


def _candidate_dates(match: re.Match[str], today: date) -> list[date]:
    """The dates the text may mean, earliest first: a year is only guessed if not given."""
    if match["rel"]:
        return [today + timedelta(days=1 if match["rel"] == "tomorrow" else 0)]
    month_word = match["mon1"] or match["mon2"]
    month = _MONTHS[month_word] if month_word else int(match["im"])
    day = int(match["d1"] or match["d2"] or match["id"])
    year = match["y1"] or match["y2"] or match["iy"]
    years = [int(year)] if year else list(range(today.year, today.year + 9))  # Feb 29
    dates: list[date] = []
    for candidate in years:
        try:
            dates.append(date(candidate, month, day))
        except ValueError:
            continue
    if not dates:
        raise ScheduleError(f"{match.string!r} is not a valid date")
    return dates
