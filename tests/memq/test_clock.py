"""Time-ordered ids and RFC3339 timestamps."""

from __future__ import annotations

import os
import uuid
from datetime import UTC, datetime, timedelta, timezone

import pytest

from memq.clock import normalize_rfc3339, parse_rfc3339, to_rfc3339, uuid7
from memq.errors import ValidationError


def test_uuid7_is_a_valid_uuid_and_time_ordered() -> None:
    ids = [uuid7() for _ in range(2000)]
    assert all(uuid.UUID(i).version == 7 for i in ids)
    assert len(set(ids)) == len(ids)
    prefixes = [i[:13] for i in ids]  # the 48-bit millisecond timestamp
    assert prefixes == sorted(prefixes)


def test_rfc3339_round_trip_in_utc() -> None:
    moment = datetime(2026, 3, 5, 15, 0, 1, 250000, tzinfo=timezone(timedelta(hours=2)))
    text = to_rfc3339(moment)
    assert text == "2026-03-05T13:00:01.250000Z"
    assert parse_rfc3339(text) == moment.astimezone(UTC)
    assert normalize_rfc3339("2026-03-05T15:00:01.25+02:00") == text


@pytest.mark.parametrize(
    ("value", "message"),
    [
        ("2026-03-05T15:00:00", "no time zone offset"),
        ("yesterday", "must be an RFC3339 string"),
        ("2026-13-05T15:00:00Z", "is not RFC3339"),
        (12345, "must be an RFC3339 string"),
    ],
)
def test_bad_timestamps(value: object, message: str) -> None:
    with pytest.raises(ValidationError, match=message):
        normalize_rfc3339(value)  # type: ignore[arg-type]


def test_naive_datetime_is_refused() -> None:
    with pytest.raises(ValidationError, match="has no time zone"):
        to_rfc3339(datetime(2026, 1, 1))


def test_a_forked_child_makes_other_ids_than_its_parent() -> None:
    uuid7()  # the parent's pool of random bytes is filled
    read, write = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child: its next id, to the parent, then out
        os.write(write, uuid7().encode())
        os._exit(0)
    os.waitpid(pid, 0)
    child = os.read(read, 64).decode()
    os.close(read)
    os.close(write)
    assert child[14:] != uuid7()[14:]  # the random parts (the milliseconds may agree)
