"""When does a cron expression run next, evaluated in a task's local time zone.

croniter's own handling of aware datetimes is not what memq wants: with croniter 7.0 a
daily "30 2 * * *" job in America/New_York ran at 3:00 on the spring-forward day, and a
daily "30 1 * * *" job ran twice on the fall-back day. So croniter only walks naive
local wall-clock times here, and each wall-clock time becomes an instant by the same
rules memq.schedule uses for one-shots:

* A wall-clock time that does not exist (spring forward) runs as far past the
  transition as it was meant to be past the gap start: "30 2 * * *" runs at 3:30 local
  on that day, once. Jobs that would fall in the gap do not run twice: "*/15 * * * *"
  runs at 1:45 and then 3:00, 3:15 (local).
* A wall-clock time that happens twice (fall back) runs at its first occurrence only --
  "30 1 * * *" runs once -- except when the hour field is "*": such jobs ("0 * * * *",
  "*/15 * * * *") are elapsed-time intervals, so they also run in the repeated hour.
* Anything else keeps its local wall-clock time: "0 9 * * *" is 9:00 local on both
  sides of a change, so its UTC hour shifts by one.
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from zoneinfo import ZoneInfo

from croniter import croniter

from memq.clock import parse_rfc3339, to_rfc3339
from memq.errors import ScheduleError
from memq.schedule import validate_cron, validate_timezone

# Longer than any DST shift in tzdata (most are 1h, a few 30min or 2h), so a change this
# close to `after` is seen.
_WINDOW = timedelta(hours=3)


def next_run(cron_expr: str, *, after: datetime, tz: str) -> datetime:
    """The first run strictly after ``after``, as an aware UTC datetime."""
    return next_runs(cron_expr, after=after, tz=tz, count=1)[0]


def first_run(
    cron_expr: str, tz: str, *, oneshot: bool, run_at: str | None, after: str
) -> str:
    """When a task scheduled (or re-timed, or resumed) at ``after`` runs first, as UTC
    RFC3339: a one-shot at its ``run_at`` (even one already past: a missed one-shot fires
    once), a recurring task at its first cron slot after ``after``."""
    if oneshot:
        if run_at is None:
            raise ScheduleError("a one-shot task needs run_at")
        return to_rfc3339(parse_rfc3339(run_at, what="run_at"))
    return to_rfc3339(next_run(cron_expr, after=parse_rfc3339(after), tz=tz))


def next_runs(cron_expr: str, *, after: datetime, tz: str, count: int) -> list[datetime]:
    """The next ``count`` runs strictly after ``after``, ascending, as aware UTC datetimes."""
    if after.tzinfo is None or after.utcoffset() is None:
        raise ScheduleError(f"after must be timezone-aware, got {after.isoformat()}")
    if count < 0:
        raise ValueError(f"count must be >= 0, got {count}")
    expr, zone = validate_cron(cron_expr), validate_timezone(tz)
    # croniter expands "*", "*/1" and "0-23" alike to ["*"]
    every_hour = croniter(expr).expanded[1] == ["*"]
    runs: list[datetime] = []
    try:
        moment = after.astimezone(UTC)
        for _ in range(count):
            moment = _next(expr, moment, zone, every_hour=every_hour)
            runs.append(moment)
    except OverflowError:  # datetime holds years 1-9999, in UTC and in the task's zone
        raise ScheduleError(
            f"cron {cron_expr!r} in {tz}: the next run after {after.isoformat()} is outside "
            "the years 1-9999") from None
    return runs


def _next(expr: str, after: datetime, zone: ZoneInfo, *, every_hour: bool) -> datetime:
    offsets = [(after + d).astimezone(zone).utcoffset() or timedelta() for d in
               (-_WINDOW, _WINDOW)]
    # the second pass of a repeated hour has wall-clock times before `after`'s
    wall = after.astimezone(zone).replace(tzinfo=None, fold=0)
    walker = croniter(expr, wall - abs(offsets[0] - offsets[1]))
    best: datetime | None = None
    horizon: datetime | None = None
    while True:
        naive: datetime = walker.get_next(datetime)
        if horizon is not None and naive > horizon:
            break
        instants, shift = _instants(naive, zone, every_hour=every_hour)
        best = min([t for t in instants if t > after] + ([best] if best else []), default=None)
        if best is not None and horizon is None:
            # a time moved by a shift can land after a later wall-clock time: look that far
            horizon = naive + shift
    assert best is not None  # the loop only ends after a run was found
    return best


def _instants(naive: datetime, zone: ZoneInfo, *, every_hour: bool) -> tuple[
        list[datetime], timedelta]:
    """The UTC instants a wall-clock time runs at, and the DST shift at it (0 if none)."""
    first, second = naive.replace(tzinfo=zone, fold=0), naive.replace(tzinfo=zone, fold=1)
    before, later = first.utcoffset() or timedelta(), second.utcoffset() or timedelta()
    # fold=0 keeps the offset from before the change: in a gap that moves the time
    # forward by the gap, in an overlap it picks the first occurrence
    instants = [first.astimezone(UTC)]
    if before > later and every_hour:
        instants.append(second.astimezone(UTC))
    return instants, abs(before - later)
