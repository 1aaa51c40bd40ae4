"""Table-driven tests of store.cron: next runs in local time, across DST changes."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from itertools import pairwise
from zoneinfo import ZoneInfo

import pytest
from croniter import croniter
from hypothesis import given, settings
from hypothesis import strategies as st

from memq.cron import next_run, next_runs
from memq.errors import ScheduleError
from memq.schedule import parse_schedule

NY, BERLIN = "America/New_York", "Europe/Berlin"
# US clocks: 2026-03-08 02:00 EST -> 03:00 EDT, 2026-11-01 02:00 EDT -> 01:00 EST.
# Berlin: 2026-03-29 02:00 CET -> 03:00 CEST, 2026-10-25 03:00 CEST -> 02:00 CET.
BEFORE_US_SPRING = datetime(2026, 3, 7, 12, 0, tzinfo=UTC)
BEFORE_US_FALL = datetime(2026, 10, 31, 12, 0, tzinfo=UTC)


def utc(month: int, day: int, hour: int, minute: int = 0, year: int = 2026) -> datetime:
    return datetime(year, month, day, hour, minute, tzinfo=UTC)


NEXT_RUN = [
    # (expr, tz, after, expected next run): strictly after `after`
    ("*/15 * * * *", "UTC", utc(3, 7, 12, 7), utc(3, 7, 12, 15)),
    ("*/15 * * * *", "UTC", utc(3, 7, 12, 15), utc(3, 7, 12, 30)),
    ("0 9 * * *", "UTC", utc(3, 7, 9), utc(3, 8, 9)),
    ("0 9 * * *", BERLIN, BEFORE_US_SPRING, utc(3, 8, 8)),
    ("0 9 * * *", NY, BEFORE_US_SPRING, utc(3, 7, 14)),
    ("0 9 * * *", "Asia/Kolkata", BEFORE_US_SPRING, utc(3, 8, 3, 30)),
    ("30 8 * * 1-5", "Asia/Kolkata", BEFORE_US_SPRING, utc(3, 9, 3)),  # Sat -> Mon
    ("0 0 1 * *", BERLIN, BEFORE_US_SPRING, utc(3, 31, 22)),  # April 1st, CEST
    ("0 15 5 3 *", "UTC", BEFORE_US_SPRING, utc(3, 5, 15, year=2027)),
    ("0 0 29 2 *", "UTC", BEFORE_US_SPRING, utc(2, 29, 0, year=2028)),
    ("0 12 * * MON", "UTC", BEFORE_US_SPRING, utc(3, 9, 12)),
    # a skipped wall-clock time runs once, moved forward by the gap
    ("30 2 * * *", NY, BEFORE_US_SPRING, utc(3, 8, 7, 30)),  # 03:30 EDT
    ("30 2 * * *", BERLIN, utc(3, 28, 12), utc(3, 29, 1, 30)),  # 03:30 CEST
    # a wall-clock time after the gap that is sooner than a moved one wins
    ("45 2,3 * * *", BERLIN, utc(3, 28, 12), utc(3, 29, 1, 45)),
    ("0,45 2 * * *", BERLIN, utc(3, 28, 12), utc(3, 29, 1, 0)),
    # a repeated wall-clock time runs at its first occurrence
    ("30 1 * * *", NY, BEFORE_US_FALL, utc(11, 1, 5, 30)),  # 01:30 EDT
    ("30 2 * * *", BERLIN, utc(10, 24, 12), utc(10, 25, 0, 30)),  # 02:30 CEST
    # ...but an every-hour job also runs in the repeated hour, even when `after` is before
    # the change in UTC yet after those wall-clock times
    ("0 * * * *", NY, utc(11, 1, 5, 50), utc(11, 1, 6)),  # 01:50 EDT -> 01:00 EST
    ("*/30 * * * *", NY, utc(11, 1, 6, 10), utc(11, 1, 6, 30)),  # 01:10 EST -> 01:30 EST
]


@pytest.mark.parametrize(("expr", "tz", "after", "expected"), NEXT_RUN)
def test_next_run(expr: str, tz: str, after: datetime, expected: datetime) -> None:
    assert next_run(expr, after=after, tz=tz) == expected


def local(moments: list[datetime], tz: str) -> list[str]:
    return [m.astimezone(ZoneInfo(tz)).strftime("%m-%d %H:%M%z") for m in moments]


SEQUENCES = [
    # (expr, tz, after, count, expected local times)
    # a daily 9am job stays at 9am local, so its UTC hour moves by one
    ("0 9 * * *", NY, BEFORE_US_SPRING, 3,
     ["03-07 09:00-0500", "03-08 09:00-0400", "03-09 09:00-0400"]),
    ("0 9 * * *", NY, BEFORE_US_FALL, 3,
     ["10-31 09:00-0400", "11-01 09:00-0500", "11-02 09:00-0500"]),
    ("0 9 * * *", BERLIN, utc(3, 28, 12), 2, ["03-29 09:00+0200", "03-30 09:00+0200"]),
    # a daily 2:30am job runs exactly once on the spring-forward day, at 03:30
    ("30 2 * * *", NY, BEFORE_US_SPRING, 3,
     ["03-08 03:30-0400", "03-09 02:30-0400", "03-10 02:30-0400"]),
    # a daily 1:30am job runs once on the fall-back day
    ("30 1 * * *", NY, BEFORE_US_FALL, 3,
     ["11-01 01:30-0400", "11-02 01:30-0500", "11-03 01:30-0500"]),
    # intervals skip the missing hour without running twice...
    ("*/30 * * * *", NY, utc(3, 8, 6), 4,
     ["03-08 01:30-0500", "03-08 03:00-0400", "03-08 03:30-0400", "03-08 04:00-0400"]),
    ("0 * * * *", NY, utc(3, 8, 4, 30), 4,
     ["03-08 00:00-0500", "03-08 01:00-0500", "03-08 03:00-0400", "03-08 04:00-0400"]),
    # ...and run through the repeated hour twice, once per real hour
    ("0 * * * *", NY, utc(11, 1, 3, 30), 5, ["11-01 00:00-0400", "11-01 01:00-0400",
                                            "11-01 01:00-0500", "11-01 02:00-0500",
                                            "11-01 03:00-0500"]),
    # hours that are not every hour keep wall-clock semantics: 02:00 once
    ("0 */2 * * *", BERLIN, utc(10, 24, 21), 3,
     ["10-25 00:00+0200", "10-25 02:00+0200", "10-25 04:00+0100"]),
]


@pytest.mark.parametrize(("expr", "tz", "after", "count", "expected"), SEQUENCES)
def test_next_runs_across_dst(expr: str, tz: str, after: datetime, count: int,
                              expected: list[str]) -> None:
    assert local(next_runs(expr, after=after, tz=tz, count=count), tz) == expected


@pytest.mark.parametrize("expr", ["*/15 * * * *", "0 * * * *", "30 1 * * *", "30 2 * * *",
                                  "0 9 * * 1-5", "0 0 1 * *", "5 1,2,3 * * 0"])
@pytest.mark.parametrize("tz", [NY, BERLIN])
def test_runs_strictly_increase_through_both_changes(expr: str, tz: str) -> None:
    for after in (utc(3, 7, 0), utc(3, 28, 0), utc(10, 24, 0), utc(10, 31, 0)):
        runs = next_runs(expr, after=after, tz=tz, count=200)
        assert runs[0] > after
        assert all(a < b for a, b in pairwise(runs))


@pytest.mark.parametrize("expr", ["30 2 * * *", "30 1 * * *", "0 9 * * *"])
@pytest.mark.parametrize("tz", [NY, BERLIN])
def test_daily_job_runs_once_per_local_day_for_a_year(expr: str, tz: str) -> None:
    runs = next_runs(expr, after=utc(1, 1, 0), tz=tz, count=366)
    days = [run.astimezone(ZoneInfo(tz)).date() for run in runs]
    assert len(set(days)) == len(days)
    assert days[-1] - days[0] == timedelta(days=365)  # and no day was skipped


@pytest.mark.parametrize("expr", ["*/7 * * * *", "0 9 * * 1-5", "15 3 1,15 * *",
                                  "0 */5 * * *", "0 0 29 2 *", "0 12 * jan-mar sun"])
@pytest.mark.parametrize("tz", ["UTC", "Asia/Kolkata"])
def test_agrees_with_croniter_where_there_is_no_dst(expr: str, tz: str) -> None:
    start = BEFORE_US_SPRING.astimezone(ZoneInfo(tz))
    walker = croniter(expr, start)
    expected = [walker.get_next(datetime).astimezone(UTC) for _ in range(20)]
    assert next_runs(expr, after=BEFORE_US_SPRING, tz=tz, count=20) == expected


@pytest.mark.parametrize(("text", "tz"), [
    ("in 2 hours", NY), ("tomorrow at 2:30am", NY), ("on 5 March at 15:00", BERLIN),
    ("March 5 at 3pm", "Asia/Kolkata"), ("tomorrow at 1:30am", NY),
])
def test_oneshot_cron_first_runs_at_run_at(text: str, tz: str) -> None:
    now = BEFORE_US_FALL if "1:30" in text else BEFORE_US_SPRING
    parsed = parse_schedule(text, now=now, tz=tz)
    assert next_run(parsed.cron_expr, after=now, tz=tz) == parsed.run_at


def test_count_zero_and_results_are_utc() -> None:
    assert next_runs("* * * * *", after=BEFORE_US_SPRING, tz=NY, count=0) == []
    run = next_run("0 9 * * *", after=BEFORE_US_SPRING, tz=BERLIN)
    assert run.tzinfo is UTC


@pytest.mark.parametrize(("kwargs", "error", "fragment"), [
    ({"cron_expr": "0 9 * * *", "after": datetime(2026, 3, 7), "tz": NY}, ScheduleError,
     "after must be timezone-aware"),
    ({"cron_expr": "0 9 * * *", "after": BEFORE_US_SPRING, "tz": "Nope/Nowhere"},
     ScheduleError, "unknown time zone 'Nope/Nowhere'"),
    ({"cron_expr": "0 25 * * *", "after": BEFORE_US_SPRING, "tz": NY}, ScheduleError,
     "invalid hour field '25'"),
    ({"cron_expr": "0 0 31 4 *", "after": BEFORE_US_SPRING, "tz": NY}, ScheduleError,
     "never occurs"),
    ({"cron_expr": "0 9 * *", "after": BEFORE_US_SPRING, "tz": NY}, ScheduleError,
     "has 4 fields"),
])
def test_next_run_rejects(kwargs: dict[str, object], error: type[Exception],
                          fragment: str) -> None:
    with pytest.raises(error, match=fragment):
        next_run(**kwargs)  # type: ignore[arg-type]


def test_negative_count_is_refused() -> None:
    with pytest.raises(ValueError, match="count must be >= 0"):
        next_runs("0 9 * * *", after=BEFORE_US_SPRING, tz=NY, count=-1)


@pytest.mark.parametrize(("after", "tz"), [
    (datetime(9999, 12, 31, 23, 0, tzinfo=UTC), "UTC"),
    (datetime(9999, 12, 31, 0, 0, tzinfo=UTC), "Etc/GMT+12"),
    (datetime(9999, 12, 30, 0, 0, tzinfo=UTC), "Pacific/Kiritimati"),
    (datetime(1, 1, 1, 0, 0, tzinfo=UTC), "Etc/GMT+12"),
])
def test_a_run_beyond_what_a_date_holds_is_a_schedule_error(after: datetime, tz: str) -> None:
    with pytest.raises(ScheduleError, match="is outside the years 1-9999"):
        next_run("0 9 * * *", after=after, tz=tz)


@settings(max_examples=200, derandomize=True, database=None)
@given(after=st.datetimes(min_value=datetime(1, 1, 1), max_value=datetime(9999, 12, 31),
                          timezones=st.just(UTC)),
       expr=st.sampled_from(["0 9 * * *", "*/15 * * * *", "30 2 * * 0", "0 0 29 2 *"]),
       tz=st.sampled_from(["UTC", "Etc/GMT+12", "Etc/GMT-14", "America/New_York"]))
def test_next_run_is_later_or_a_schedule_error(after: datetime, expr: str, tz: str) -> None:
    try:
        run = next_run(expr, after=after, tz=tz)
    except ScheduleError as exc:
        message = str(exc)
    else:
        assert run > after
        return
    assert "is outside the years 1-9999" in message
