"""The event vocabulary: every type validates, and bad events say exactly what is wrong."""

from __future__ import annotations

from typing import Any

import orjson
import pytest
from hypothesis import given
from hypothesis import strategies as st

from memq.clock import now_rfc3339
from memq.config import LimitsConfig
from memq.errors import InvalidEvent
from memq.events import SCHEMAS, Event, EventType, decode, encode


def event(**changes: Any) -> dict[str, Any]:
    base: dict[str, Any] = {
        "id": "e1", "type": "message.appended", "v": 1, "session_id": "s1",
        "created_at": now_rfc3339(),
        "payload": {"message_id": "m1", "role": "user", "content": "hi", "importance": 0.5},
    }
    payload = changes.pop("payload", {})
    base.update(changes)
    base["payload"] = {**base["payload"], **payload}
    return base


def test_every_declared_type_has_a_schema_and_round_trips() -> None:
    assert set(SCHEMAS) == {t.value for t in EventType}
    original = decode(orjson.dumps(event()))
    assert decode(encode(original)) == original



def test_an_event_made_without_a_version_is_in_its_types_current_one() -> None:
    used = Event("e1", EventType.MACRO_USED, None, now_rfc3339(), {"macro_id": 5})
    assert used.version == SCHEMAS[EventType.MACRO_USED].version == 2
    assert Event("e2", "message.exploded", None, now_rfc3339()).version == 1
    assert decode(encode(used)) == used


def test_a_macro_use_of_version_1_from_a_client_names_the_id_it_read() -> None:
    old = event(type="macro.used", v=1, session_id=None)
    old["payload"] = {"macro_id": 3}
    decoded = decode(orjson.dumps(old))
    assert (decoded.version, decoded.payload) == (2, {"macro_id": 3})
    old["payload"] = {"macro_id": 3, "positional": True}
    with pytest.raises(InvalidEvent, match="unknown payload field"):
        decode(orjson.dumps(old))
    old["v"] = 3
    with pytest.raises(InvalidEvent, match="unsupported version 3 \\(this writer knows 2\\)"):
        decode(orjson.dumps(old))

CASES: list[tuple[dict[str, Any], str]] = [
    (event(type="message.exploded"), "unknown event type 'message.exploded'"),
    (event(v=2), "unsupported version 2 (this writer knows 1)"),
    (event(v=0), "v must be a positive integer"),
    (event(v="1"), "v must be a positive integer"),
    (event(id=""), "id must not be empty"),
    (event(id=5), "id must be a string"),
    (event(id="x" * 201), "id is 201 characters, over the 200 limit"),
    (event(session_id=None), "session_id must be a string"),
    (event(session_id="a\nb"), "session_id contains a control character"),
    (event(created_at="2026-01-01"), "created_at"),
    (event(extra=1), "unknown event field(s): extra"),
    (event(payload={"role": "robot"}), "payload.role must be one of"),
    (event(payload={"importance": 1.5}), "payload.importance must be between 0.0 and 1.0, got 1.5"),
    (event(payload={"importance": -0.1}),
     "payload.importance must be between 0.0 and 1.0, got -0.1"),
    (event(payload={"importance": True}), "payload.importance must be a number, got bool"),
    (event(payload={"content": None}), "payload.content must be a string, got NoneType"),
    (event(payload={"content": 7}), "payload.content must be a string, got int"),
    (event(payload={"content": "a\x00b"}), "payload.content contains a NUL character"),
    (event(payload={"tool_calls": {"a": 1}}), "payload.tool_calls must be a list"),
    (event(payload={"surprise": 1}), "unknown payload field(s): surprise"),
    (event(payload={"content": "é" * 40000}), "bytes, over the 65536 byte limit"),
]


@pytest.mark.parametrize(("data", "message"), CASES, ids=[m for _, m in CASES])
def test_bad_events(data: dict[str, Any], message: str) -> None:
    with pytest.raises(InvalidEvent) as info:
        decode(orjson.dumps(data))
    assert message in str(info.value)


def test_missing_required_field() -> None:
    data = event()
    del data["payload"]["role"]
    with pytest.raises(InvalidEvent, match=r"payload\.role is missing"):
        decode(orjson.dumps(data))


@pytest.mark.parametrize(
    ("raw", "message"),
    [
        (b"{", "not valid JSON"),
        (b"[]", "must be a JSON object"),
        (b'"\xff"', "not valid JSON"),
        (b"[" * 2000 + b"]" * 2000, "not valid JSON"),
        (b'{"id": "a\\ud800"}', "not valid JSON"),
    ],
)
def test_undecodable_bytes(raw: bytes, message: str) -> None:
    with pytest.raises(InvalidEvent, match=message):
        decode(raw)


def test_oversized_event_is_refused_before_parsing() -> None:
    limits = LimitsConfig(max_payload_bytes=100)
    with pytest.raises(InvalidEvent, match="over the 100 limit"):
        decode(orjson.dumps(event(payload={"content": "x" * 200})), limits)


def test_encode_refuses_lone_surrogates() -> None:
    bad = Event(id="e", type="fact.set", session_id=None, created_at=now_rfc3339(),
                payload={"category": "c", "key": "k", "value": "\ud800", "source": "user"})
    with pytest.raises(ValueError, match=r"payload\.value contains a lone surrogate"):
        encode(bad)


# -- limits are inclusive: the value at the limit passes, one past it is refused ------------


def test_an_identifier_at_its_limit_passes_and_one_more_character_does_not() -> None:
    from memq.errors import ValidationError
    from memq.events import check_identifier

    assert check_identifier("name", "n" * 200) == "n" * 200
    assert check_identifier("name", "n" * 5, max_chars=5) == "nnnnn"
    with pytest.raises(ValidationError, match="name is 201 characters, over the 200 limit"):
        check_identifier("name", "n" * 201)
    with pytest.raises(ValidationError, match="name is 6 characters, over the 5 limit"):
        check_identifier("name", "n" * 6, max_chars=5)


BLANKS = " \t\n\r\x0b\x0c\u00a0\u2003\u3000"
"""What a person sees as nothing: spaces, tabs, line ends, wide spaces."""


@given(blank=st.text(alphabet=BLANKS, max_size=6),
       controls=st.lists(st.sampled_from("\x1c\x1d\x1e\x1f"), min_size=1, max_size=3),
       at=st.integers(0, 6))
def test_a_blank_id_with_a_separator_control_is_refused_for_the_control(
        blank: str, controls: list[str], at: int) -> None:
    """str.strip() takes U+001C-U+001F (the tenant separator among them) for whitespace:
    such an id was refused as empty, which hid what was wrong with it."""
    from memq.errors import ValidationError
    from memq.events import check_identifier

    value = blank[:at] + "".join(controls) + blank[at:]
    with pytest.raises(ValidationError, match="session_id contains a control character"):
        check_identifier("session_id", value)


@given(blank=st.text(alphabet=BLANKS, max_size=6))
def test_an_id_of_blanks_alone_is_empty(blank: str) -> None:
    from memq.errors import ValidationError
    from memq.events import check_identifier

    with pytest.raises(ValidationError, match="session_id must not be empty"):
        check_identifier("session_id", blank)


@given(value=st.integers() | st.floats() | st.booleans() | st.text(max_size=5) | st.none()
       | st.lists(st.integers(), max_size=2))
def test_a_count_is_a_whole_number_in_its_range_or_a_validation_error(value: Any) -> None:
    """A page's limit reaches SQLite's LIMIT, which refuses a float: 1.5 once came back as
    a database fault (503) instead of the caller's mistake."""
    from memq.errors import ValidationError
    from memq.events import check_count

    fits = type(value) is int and 1 <= value <= 1000
    if fits:
        assert check_count("limit", value, 1, 1000) == value
    else:
        with pytest.raises(ValidationError, match="limit must be an integer from 1 to 1000"):
            check_count("limit", value, 1, 1000)


@pytest.mark.parametrize(("payload", "problem"), [
    ({"importance": 0.0}, None),
    ({"importance": 1.0}, None),
    ({"importance": 1.0000001}, "payload.importance must be between 0.0 and 1.0"),
    ({"importance": -1e-9}, "payload.importance must be between 0.0 and 1.0"),
    ({"content": "c" * 64}, None),
    ({"content": "c" * 65}, "payload.content is 65 bytes, over the 64 byte limit"),
    ({"content": "é" * 32}, None),  # 64 bytes in UTF-8
    ({"content": "é" * 33}, "payload.content is 66 bytes, over the 64 byte limit"),
    ({"tool_name": "t" * 200}, None),
    ({"tool_name": "t" * 201}, "payload.tool_name is 201 characters, over the 200 limit"),
])
def test_payload_limits_are_inclusive(payload: dict[str, Any], problem: str | None) -> None:
    limits = LimitsConfig(max_content_bytes=64)
    data = event(payload=payload)
    if problem is None:
        assert decode(orjson.dumps(data), limits).payload == {**data["payload"]}
    else:
        with pytest.raises(InvalidEvent, match=problem):
            decode(orjson.dumps(data), limits)


def test_a_proposed_fact_value_at_its_limit_passes_and_one_more_does_not() -> None:
    from memq.errors import ValidationError
    from memq.events import MAX_FACT_VALUE_CHARS, check_proposed_fact

    fact = {"category": "user", "key": "city", "value": "v" * MAX_FACT_VALUE_CHARS}
    assert check_proposed_fact(fact) == fact
    assert MAX_FACT_VALUE_CHARS == 2000
    with pytest.raises(ValidationError, match="at most 2000 characters"):
        check_proposed_fact({**fact, "value": "v" * 2001})
