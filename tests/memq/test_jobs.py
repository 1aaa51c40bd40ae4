"""memq.jobs: the bounds a worker puts on what it reads from a job's hash."""

from __future__ import annotations

import zlib

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from memq.config import MAX_JOB_TIMEOUT_S
from memq.jobs import clamped_timeout, inflated_size, task_run_digest


@pytest.mark.parametrize(("stored", "seconds"), [
    (b"300", 300), (1, 1), (MAX_JOB_TIMEOUT_S, MAX_JOB_TIMEOUT_S),
    (b"-1", 180), (b"0", 180), (MAX_JOB_TIMEOUT_S + 1, MAX_JOB_TIMEOUT_S),
    (b"soon", 180), (b"1h", 180), (b"", 180),
])
def test_a_timeout_is_whole_seconds_within_bounds(stored: bytes | int, seconds: int) -> None:
    assert clamped_timeout(stored) == seconds


@settings(max_examples=200, derandomize=True, database=None)
@given(st.one_of(st.integers(), st.binary(max_size=30), st.text(max_size=30)))
def test_any_stored_timeout_is_clamped(stored: bytes | str | int) -> None:
    assert 1 <= clamped_timeout(stored) <= MAX_JOB_TIMEOUT_S


def test_inflation_is_counted_no_further_than_the_limit() -> None:
    bomb = zlib.compress(b"\0" * 10_000_000, 9)
    assert len(bomb) < 20_000
    assert inflated_size(bomb, 1000) == 1001  # stops there: 10 MB never exist at once
    assert inflated_size(zlib.compress(b"[1, 2]"), 1000) == 6
    assert inflated_size(b"[1, 2]", 1000) == 6  # not zlib: RQ reads it as it is


def test_the_digest_of_a_run_ignores_key_order_only() -> None:
    run = {"task_id": "t", "prompt": "p", "trusted": False}
    assert task_run_digest(run) == task_run_digest(dict(reversed(list(run.items()))))
    assert task_run_digest(run) != task_run_digest({**run, "trusted": True})
