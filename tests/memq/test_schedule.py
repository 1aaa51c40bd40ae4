"""Table-driven tests of the schedule grammar in memq.schedule; `now` is always fixed."""

from __future__ import annotations

import re
from datetime import UTC, datetime, timedelta, timezone

import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st

from memq.errors import ScheduleError, ValidationError
from memq.schedule import ParsedSchedule, parse_schedule, validate_cron, validate_timezone

# Saturday 2026-03-07 12:00 UTC: 07:00 in New York, the day before US clocks spring
# forward; 13:00 in Berlin; 17:30 in Kolkata.
NOW = datetime(2026, 3, 7, 12, 0, tzinfo=UTC)
# Saturday 2026-10-31 12:00 UTC: the day before US clocks fall back.
NOW_FALL = datetime(2026, 10, 31, 12, 0, tzinfo=UTC)
ZONES = ("UTC", "Europe/Berlin", "America/New_York", "Asia/Kolkata")


def utc(year: int, month: int, day: int, hour: int, minute: int) -> datetime:
    return datetime(year, month, day, hour, minute, tzinfo=UTC)


RECURRING = [
    # cron, validated and normalised
    ("*/15 * * * *", "*/15 * * * *"),
    ("0 9 * * MON-FRI", "0 9 * * 1-5"),
    ("  0   0  1  jan,Jul  * ", "0 0 1 1,7 *"),
    ("0 0 * * fri-sun", "0 0 * * 5-7"),
    ("0-30/10 8-18/2 * * 1,3", "0-30/10 8-18/2 * * 1,3"),
    # keywords
    ("hourly", "0 * * * *"),
    ("DAILY", "0 0 * * *"),
    ("weekly", "0 0 * * 0"),
    ("monthly", "0 0 1 * *"),
    ("@hourly", "0 * * * *"),
    # intervals
    ("every 15 minutes", "*/15 * * * *"),
    ("  Every   15   MINUTES ", "*/15 * * * *"),
    ("every 5 m", "*/5 * * * *"),
    ("every 10 min", "*/10 * * * *"),
    ("every 20 mins", "*/20 * * * *"),
    ("every 30 minute", "*/30 * * * *"),
    ("every 7 minutes", "*/7 * * * *"),  # restarts at :00, see the module docstring
    ("every 15m", "*/15 * * * *"),
    ("every minute", "* * * * *"),
    ("every 1 minute", "* * * * *"),
    ("every 2 hours", "0 */2 * * *"),
    ("every 3 h", "0 */3 * * *"),
    ("every 4 hr", "0 */4 * * *"),
    ("every 6 hrs", "0 */6 * * *"),
    ("every 12 hour", "0 */12 * * *"),
    ("every hour", "0 * * * *"),
    ("every 23 hours", "0 */23 * * *"),
    # every day at a time
    ("every day at 9am", "0 9 * * *"),
    ("daily at 6:30pm", "30 18 * * *"),
    ("daily at 6am, 12pm and 6pm", "0 6,12,18 * * *"),
    ("daily at 6am, 12pm, and 6pm", "0 6,12,18 * * *"),
    ("daily at 9:00 and 9:30", "0,30 9 * * *"),  # a grid: one expression suffices
    ("each day at 7 a.m.", "0 7 * * *"),
    ("noon", "0 12 * * *"),
    ("midnight", "0 0 * * *"),
    ("at 9am", "0 9 * * *"),
    ("at 9", "0 9 * * *"),
    ("at 9 PM", "0 21 * * *"),
    ("at 12am", "0 0 * * *"),
    ("at 12pm", "0 12 * * *"),
    ("at 12:30am", "30 0 * * *"),
    ("18:30", "30 18 * * *"),
    ("8:30", "30 8 * * *"),
    ("00:00", "0 0 * * *"),
    ("23:59", "59 23 * * *"),
    ("9am daily", "0 9 * * *"),
    # days of the week
    ("weekdays at 8:30", "30 8 * * 1-5"),
    ("every weekday at 8:30am", "30 8 * * 1-5"),
    ("on weekdays at noon", "0 12 * * 1-5"),
    ("weekends at 10am", "0 10 * * 0,6"),
    ("every weekend at 10:15", "15 10 * * 0,6"),
    ("every Monday and Friday at 3pm", "0 15 * * 1,5"),
    ("every monday", "0 0 * * 1"),
    ("every sunday at midnight", "0 0 * * 0"),
    ("mondays at 9am", "0 9 * * 1"),
    ("on tuesdays and thursdays at 7pm", "0 19 * * 2,4"),
    ("every mon, wed and fri at 9", "0 9 * * 1,3,5"),
    ("every tue, tues, thu at 6pm", "0 18 * * 2,4"),
    ("every thur and thurs at 6pm", "0 18 * * 4"),
    ("every wed & sat at 8:05", "5 8 * * 3,6"),
    ("every Sunday, Saturday at 10am", "0 10 * * 0,6"),
    ("every monday 9am", "0 9 * * 1"),
    ("at 3pm on weekdays", "0 15 * * 1-5"),
    ("weekdays", "0 0 * * 1-5"),
]


@pytest.mark.parametrize(("text", "cron"), RECURRING)
def test_recurring(text: str, cron: str) -> None:
    assert parse_schedule(text, now=NOW) == ParsedSchedule(cron, False, None)
    assert validate_cron(cron) == cron  # every output is already normalised


@pytest.mark.parametrize("tz", ZONES)
@pytest.mark.parametrize(("text", "cron"), [
    ("weekdays at 8:30", "30 8 * * 1-5"),
    ("every 2 hours", "0 */2 * * *"),
    ("0 9 * * *", "0 9 * * *"),
])
def test_recurring_cron_is_local_time(text: str, cron: str, tz: str) -> None:
    # the zone only changes when a cron runs (store.cron), never the expression
    assert parse_schedule(text, now=NOW, tz=tz).cron_expr == cron


ONESHOTS = [
    # relative: minutes and hours are elapsed time, days and weeks are calendar days
    ("in 2 hours", "UTC", NOW, utc(2026, 3, 7, 14, 0), "0 14 7 3 *"),
    ("in 1 hour 30 minutes", "UTC", NOW, utc(2026, 3, 7, 13, 30), "30 13 7 3 *"),
    ("in 1 hour and 30 minutes", "UTC", NOW, utc(2026, 3, 7, 13, 30), "30 13 7 3 *"),
    ("in 1h30m", "Europe/Berlin", NOW, utc(2026, 3, 7, 13, 30), "30 14 7 3 *"),
    ("in 45 minutes", "Asia/Kolkata", NOW, utc(2026, 3, 7, 12, 45), "15 18 7 3 *"),
    ("In An Hour", "UTC", NOW, utc(2026, 3, 7, 13, 0), "0 13 7 3 *"),
    ("in 3 days", "UTC", NOW, utc(2026, 3, 10, 12, 0), "0 12 10 3 *"),
    ("in 2 weeks", "Europe/Berlin", NOW, utc(2026, 3, 21, 12, 0), "0 13 21 3 *"),
    # across the US change a day keeps 07:00 local while 24 hours becomes 08:00
    ("in 1 day", "America/New_York", NOW, utc(2026, 3, 8, 11, 0), "0 7 8 3 *"),
    ("in 24 hours", "America/New_York", NOW, utc(2026, 3, 8, 12, 0), "0 8 8 3 *"),
    # today / tomorrow, wall-clock time in tz
    ("tomorrow at 9am", "UTC", NOW, utc(2026, 3, 8, 9, 0), "0 9 8 3 *"),
    ("tomorrow at 9am", "Europe/Berlin", NOW, utc(2026, 3, 8, 8, 0), "0 9 8 3 *"),
    ("tomorrow at 9am", "America/New_York", NOW, utc(2026, 3, 8, 13, 0), "0 9 8 3 *"),
    ("tomorrow at 9am", "Asia/Kolkata", NOW, utc(2026, 3, 8, 3, 30), "0 9 8 3 *"),
    ("tomorrow 18:45", "UTC", NOW, utc(2026, 3, 8, 18, 45), "45 18 8 3 *"),
    ("tomorrow", "UTC", NOW, utc(2026, 3, 8, 0, 0), "0 0 8 3 *"),
    ("today at 5pm", "America/New_York", NOW, utc(2026, 3, 7, 22, 0), "0 17 7 3 *"),
    ("today at 11pm", "Asia/Kolkata", NOW, utc(2026, 3, 7, 17, 30), "0 23 7 3 *"),
    ("today at noon", "UTC", NOW - timedelta(hours=1), utc(2026, 3, 7, 12, 0), "0 12 7 3 *"),
    # dates: a past date without a year means next year
    ("on March 5th at 3pm", "UTC", NOW, utc(2027, 3, 5, 15, 0), "0 15 5 3 *"),
    ("on 5 March at 15:00", "Europe/Berlin", NOW, utc(2027, 3, 5, 14, 0), "0 15 5 3 *"),
    ("March 5 at 3pm", "Asia/Kolkata", NOW, utc(2027, 3, 5, 9, 30), "0 15 5 3 *"),
    ("on 2027-03-05 at 15:00", "America/New_York", NOW, utc(2027, 3, 5, 20, 0), "0 15 5 3 *"),
    ("2027-03-05 15:00", "UTC", NOW, utc(2027, 3, 5, 15, 0), "0 15 5 3 *"),
    ("on the 5th of march at 3pm", "UTC", NOW, utc(2027, 3, 5, 15, 0), "0 15 5 3 *"),
    ("mar. 9th at 3pm", "America/New_York", NOW, utc(2026, 3, 9, 19, 0), "0 15 9 3 *"),
    ("Dec 25th, 2026 at 8pm", "Europe/Berlin", NOW, utc(2026, 12, 25, 19, 0), "0 20 25 12 *"),
    ("on 10 march 2026", "UTC", NOW, utc(2026, 3, 10, 0, 0), "0 0 10 3 *"),
    ("march 7 at 1pm", "UTC", NOW, utc(2026, 3, 7, 13, 0), "0 13 7 3 *"),
    ("march 7 at noon", "UTC", NOW, utc(2027, 3, 7, 12, 0), "0 12 7 3 *"),  # exactly now
    ("feb 29 at noon", "UTC", NOW, utc(2028, 2, 29, 12, 0), "0 12 29 2 *"),  # next leap year
    # DST: a skipped time moves forward by the gap, a repeated one is its first occurrence
    ("tomorrow at 2:30am", "America/New_York", NOW, utc(2026, 3, 8, 7, 30), "30 3 8 3 *"),
    ("tomorrow at 1:30am", "America/New_York", NOW_FALL, utc(2026, 11, 1, 5, 30),
     "30 1 1 11 *"),
    ("on 29 march 2026 at 2:30", "Europe/Berlin", NOW, utc(2026, 3, 29, 1, 30), "30 3 29 3 *"),
    ("on 25 october 2026 at 2:30", "Europe/Berlin", NOW, utc(2026, 10, 25, 0, 30),
     "30 2 25 10 *"),
]


@pytest.mark.parametrize(("text", "tz", "now", "run_at", "cron"), ONESHOTS)
def test_oneshot(text: str, tz: str, now: datetime, run_at: datetime, cron: str) -> None:
    parsed = parse_schedule(text, now=now, tz=tz)
    assert parsed == ParsedSchedule(cron, True, run_at)
    assert parsed.run_at is not None
    assert parsed.run_at.utcoffset() == timedelta(0)


def test_now_in_any_offset_means_the_same_instant() -> None:
    same_now = NOW.astimezone(timezone(timedelta(hours=-7)))
    assert parse_schedule("in 2 hours", now=same_now) == parse_schedule("in 2 hours", now=NOW)


BAD = [
    # (text, tz, now, fragment the message must contain)
    ("blah", "UTC", NOW, "cannot understand schedule 'blah'"),
    ("every fortnight", "UTC", NOW, "'every 15 minutes'"),  # lists accepted examples
    ("", "UTC", NOW, "cannot understand schedule ''"),
    ("next monday at 9am", "UTC", NOW, "'tomorrow at 9am'"),
    ("at 13pm", "UTC", NOW, "hour 13 in '13pm' is not valid with am/pm"),
    ("daily at 0am", "UTC", NOW, "hour 0 in '0am' is not valid with am/pm"),
    ("25:00", "UTC", NOW, "hour 25 in '25:00' is out of range 0-23"),
    ("daily at 9:75", "UTC", NOW, "minute 75 in '9:75' is out of range 0-59"),
    ("daily at 6:30am and 7pm", "UTC", NOW, "one cron expression cannot express the times"),
    ("every 0 minutes", "UTC", NOW, "N must be 1-59 minutes"),
    ("every 60 minutes", "UTC", NOW, "use 'every hour' or 'every N hours'"),
    ("every 24 hours", "UTC", NOW, "N must be 1-23 hours; use 'daily'"),
    ("in 30 seconds", "UTC", NOW, "unknown time unit 'seconds'"),
    ("in 0 minutes", "UTC", NOW, "is not in the future"),
    ("today at 5am", "America/New_York", NOW, "'today at 5am' is in the past"),
    ("today at 9am", "Asia/Kolkata", NOW, "now is 2026-03-07 17:30 in Asia/Kolkata"),
    ("on 2020-01-01 at noon", "UTC", NOW, "is in the past"),
    ("march 1 2026 at 9am", "UTC", NOW, "is in the past"),
    ("feb 29 2027", "UTC", NOW, "'feb 29 2027' is not a valid date"),
    ("on march 32", "UTC", NOW, "is not a valid date"),
    ("on 2027-13-01", "UTC", NOW, "is not a valid date"),
    ("tomorrow at 9am and 5pm", "UTC", NOW, "a one-shot runs once"),
    ("60 * * * *", "UTC", NOW, "invalid minute field '60'"),
    ("* 24 * * *", "UTC", NOW, "invalid hour field '24'"),
    ("0 0 0 * *", "UTC", NOW, "invalid day-of-month field '0'"),
    ("0 0 * 13 *", "UTC", NOW, "month 13 is out of range 1-12"),
    ("0 0 * * 8", "UTC", NOW, "invalid day-of-week field '8'"),
    ("0 0 * * mon-xyz", "UTC", NOW, "'xyz' is not a number or name"),
    ("0 0 * jan mon,funday", "UTC", NOW, "'funday' is not a number or name"),
    ("*/0 * * * *", "UTC", NOW, "step 0 is out of range"),
    ("5-1 * * * *", "UTC", NOW, "range '5-1' runs backwards"),
    ("5/10 * * * *", "UTC", NOW, "needs '*' or a range"),
    ("mon * * * *", "UTC", NOW, "invalid minute field 'mon'"),
    ("0 0 30 2 *", "UTC", NOW, "day-of-month '30' never occurs in month '2'"),
    ("0 0 * * * *", "UTC", NOW, "has 6 fields, expected 5"),
    ("1 2 3", "UTC", NOW, "has 3 fields, expected 5"),
    ("daily", "Mars/Olympus", NOW, "unknown time zone 'Mars/Olympus'"),
    ("every day at 9am " * 20, "UTC", NOW, "longer than 200 characters"),
    ("daily", "UTC", datetime(2026, 3, 7, 12, 0), "now must be timezone-aware"),
    # instants a datetime cannot hold were an OverflowError, not a ScheduleError
    ("in 99999999999999 minutes", "UTC", NOW, "is beyond the year 9999 in UTC"),
    ("in 5000000000 minutes", "UTC", NOW, "is beyond the year 9999"),
    ("in 99999999 weeks", "UTC", NOW, "is beyond the year 9999"),
    ("in 9999999 days", "Asia/Kolkata", NOW, "is beyond the year 9999 in Asia/Kolkata"),
    ("in 999999999 hours", "UTC", NOW, "is beyond the year 9999"),
    ("on 9999-12-31 at 11pm", "Etc/GMT+12", NOW, "is beyond the year 9999 in Etc/GMT+12"),
    ("december 31 9999 at 11:59pm", "America/Los_Angeles", NOW, "is beyond the year 9999"),
]


@pytest.mark.parametrize(("text", "tz", "now", "fragment"), BAD)
def test_bad_input(text: str, tz: str, now: datetime, fragment: str) -> None:
    with pytest.raises(ScheduleError) as info:
        parse_schedule(text, now=now, tz=tz)
    assert fragment in str(info.value)
    assert isinstance(info.value, ValidationError)
    assert isinstance(info.value, ValueError)


@pytest.mark.parametrize("tz", ["Europe/Berlin", "America/New_York", "Asia/Kolkata", "UTC"])
def test_validate_timezone(tz: str) -> None:
    assert validate_timezone(tz).key == tz


@pytest.mark.parametrize("tz", ["", "Nope/Nowhere", "America", "../etc/passwd", "/etc/localtime",
                                "utc+5"])
def test_validate_timezone_rejects(tz: str) -> None:
    with pytest.raises(ScheduleError, match=re.escape(f"unknown time zone {tz!r}")):
        validate_timezone(tz)


@pytest.mark.parametrize(("expr", "field"), [
    ("61 * * * *", "minute"), ("* -1 * * *", "hour"), ("* * 1-40 * *", "day-of-month"),
    ("* * * foo *", "month"), ("* * * * 1-9", "day-of-week"), ("* * * * 1,", "day-of-week"),
    ("0 0 * * L", "day-of-week"), ("0 0 ? * *", "day-of-month"),
])
def test_validate_cron_names_the_field(expr: str, field: str) -> None:
    with pytest.raises(ScheduleError, match=f"invalid {field} field"):
        validate_cron(expr)


def test_day_of_month_with_day_of_week_is_an_or() -> None:
    # cron runs when either day field matches, so "the 30th or a Monday" is possible in Feb
    assert validate_cron("0 0 30 2 1") == "0 0 30 2 1"


FAR_ZONES = ["UTC", "Etc/GMT+12", "Etc/GMT-14", "Pacific/Kiritimati", "Pacific/Pago_Pago",
             "America/St_Johns", "Asia/Kathmandu"]


@settings(max_examples=300, derandomize=True, database=None)
@given(
    count=st.one_of(st.integers(1, 10**6), st.integers(10**6, 10**40)),
    unit=st.sampled_from(["minutes", "hours", "days", "weeks"]),
    tz=st.sampled_from(FAR_ZONES),
    now=st.datetimes(min_value=datetime(1, 1, 2), max_value=datetime(9999, 12, 30),
                     timezones=st.just(UTC)),
)
@example(count=99999999999999, unit="minutes", tz="UTC", now=NOW)
def test_any_relative_schedule_parses_or_says_why(count: int, unit: str, tz: str,
                                                  now: datetime) -> None:
    """Whatever the amount, zone and now: a one-shot or a ScheduleError, nothing else."""
    parsed = outcome(f"in {count} {unit}", now, tz)
    if isinstance(parsed, str):
        assert "beyond the year 9999" in parsed
    else:
        assert parsed.run_at is not None
        assert parsed.run_at > now


@settings(max_examples=300, derandomize=True, database=None)
@given(year=st.integers(1, 9999), month=st.integers(1, 12), day=st.integers(1, 28),
       hour=st.sampled_from(["1am", "noon", "11:59pm"]), tz=st.sampled_from(FAR_ZONES))
@example(year=9999, month=12, day=28, hour="11:59pm", tz="Etc/GMT+12")
def test_any_dated_schedule_parses_or_says_why(year: int, month: int, day: int, hour: str,
                                               tz: str) -> None:
    parsed = outcome(f"on {year:04d}-{month:02d}-{day:02d} at {hour}", NOW, tz)
    if isinstance(parsed, str):
        assert "is in the past" in parsed or "beyond the year 9999" in parsed
    else:
        assert parsed.run_at is not None
        assert parsed.run_at > NOW


def outcome(text: str, now: datetime, tz: str) -> ParsedSchedule | str:
    """The parsed schedule, or the ScheduleError's message (any other error fails the test)."""
    try:
        return parse_schedule(text, now=now, tz=tz)
    except ScheduleError as exc:
        return str(exc)
