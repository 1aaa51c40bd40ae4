"""Problem details both ways: every error of memq's tree comes back as its own class."""

from __future__ import annotations

import orjson
import pytest

from memq import errors
from memq.problems import from_error, problem, status_of, to_error
from memq.rejections import Rejection


@pytest.mark.parametrize("cls", [
    errors.ValidationError, errors.ScheduleError, errors.InvalidEvent, errors.NotFound,
    errors.PermissionDenied, errors.AuthenticationFailed, errors.FlushTimeout,
    errors.BrokerError, errors.StoreError, errors.DatabaseMismatch, errors.ConfigError,
])
def test_an_error_survives_the_round_trip(cls: type[errors.MemqError]) -> None:
    body = from_error(cls("what went wrong"))
    assert body["title"] == cls.__name__
    assert body["type"] == f"urn:memq:problem:{cls.__name__}"
    again = to_error(body["status"], body)
    assert type(again) is cls
    assert str(again) == "what went wrong"


def test_statuses() -> None:
    assert status_of(errors.ScheduleError("x")) == 422  # a ValidationError's
    assert status_of(errors.NotFound("x")) == 404
    assert status_of(errors.PermissionDenied("x")) == 403
    assert status_of(errors.AuthenticationFailed("x")) == 401
    assert status_of(errors.ConfigError("x")) == 500


def test_rejections_travel_with_their_error() -> None:
    sent = errors.EventsRejected("rejected", [Rejection("e1", "fact.set", "too big", "1-0")])
    again = to_error(409, from_error(sent))
    assert isinstance(again, errors.EventsRejected)
    assert again.rejections == sent.rejections


def test_an_answer_that_names_no_memq_error_becomes_one_by_its_status() -> None:
    assert type(to_error(404, "<html>nginx</html>")) is errors.NotFound
    assert type(to_error(400, {"title": "Bad Request"})) is errors.ValidationError
    assert type(to_error(502, None)) is errors.MemqError
    assert type(to_error(403, problem("object", 403, "x"))) is errors.PermissionDenied


def test_a_detail_quoting_what_no_answer_can_encode_is_shown_escaped() -> None:
    """A lone surrogate a caller sent, quoted in an error, once made the answer itself
    fail (orjson encodes UTF-8 only): the server answered 500 for a 4xx."""
    body = problem("ValidationError", 422, "users 'a\ud800\x1b[2J': no such name")
    assert orjson.loads(orjson.dumps(body))["detail"] == (
        "users 'a\\ud800\\x1b[2J': no such name")
