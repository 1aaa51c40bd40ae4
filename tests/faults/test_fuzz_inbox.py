"""A property-based fuzzer against the real writer: no single inbox entry stops it.

Each example is a handful of stream entries. Every entry starts as a valid event of some
type (every type of the vocabulary is drawn) and then, most of the time, has one thing
wrong with it: an envelope or payload field replaced by a hostile value (wrong types,
sizes, Unicode, numbers at the limits, timestamps that overflow), a field removed, a
field added, the raw JSON broken, the id of an event already committed reused, or the
stream entry's own fields tampered with. After each entry comes a good neighbour, a
plain ``message.appended``. The property, checked against a real ``redis-server``, a
real SQLite file and the real writer (in a thread of this process):

- the writer never stops: its threads are alive and its heartbeat is there;
- every entry is committed or set aside, and every neighbour is committed;
- a reason quotes at most ``MAX_REASON_CHARS`` characters, with no raw control character.

At the end the log is replayed into a scratch database and must give the same rows.

The run is seeded and bounded (``MEMQ_FUZZ_EXAMPLES``, default 120; ``MEMQ_FUZZ_SEED``).
A longer hunt: ``MEMQ_FUZZ_EXAMPLES=5000 .venv/bin/python -m pytest
tests/faults/test_fuzz_inbox.py``. Every bug the fuzzer found is kept as an ``@example``.
"""

from __future__ import annotations

import base64
import dataclasses
import os
import re
import struct
import time
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import apsw
import orjson
import pytest
import redis
from hypothesis import HealthCheck, example, given, seed, settings
from hypothesis import strategies as st

from memq import authority, names, tenants
from memq.clock import now_rfc3339, uuid7
from memq.config import Config
from memq.events import ENVELOPE_FIELDS, SCHEMAS, EventType, Field
from memq.events import rules as field_rules
from memq.store import rebuild
from memq.store.write.rejected import MAX_REASON_CHARS
from memq.testing import RedisServer, WriterThread
from tests.faults import figures

pytestmark = [pytest.mark.faults, pytest.mark.redis]

EXAMPLES = int(os.environ.get("MEMQ_FUZZ_EXAMPLES", "120"))
SEED = int(os.environ.get("MEMQ_FUZZ_SEED", "20261201"))

STREAMS = names.INBOX_STREAMS
"""Every stream the writer reads."""

SESSION = "fuzz"
KNOWN_MESSAGES = [f"01a00000-0000-7000-8000-00000000000{i}" for i in range(1, 4)]
"""Messages committed first (in SESSION), for events that refer to one."""
KNOWN_TASK = "fuzz-task"
KNOWN_EVENT = {"id": "01a00000-0000-7000-8000-0000000000ee", "type": "message.appended",
               "v": 1, "session_id": SESSION, "created_at": "2026-01-01T00:00:00Z",
               "payload": {"message_id": "01a00000-0000-7000-8000-0000000000ef",
                           "role": "user", "content": "known", "importance": 0.5}}
"""An event committed first, whose id the fuzzer reuses."""


# -- the raw JSON tokens orjson would not write ---------------------------------------------


@dataclass(frozen=True)
class Raw:
    """A JSON token written as is: numbers past float or int64, NaN, lone surrogates..."""

    token: bytes


RAW_TOKENS = [
    b"1e999", b"-1e999", b"NaN", b"Infinity", b"-0", b"0.0000001e-400",
    b"18446744073709551616", b"-9223372036854775809", b"9223372036854775808",
    b"1" * 400, b'"\\ud800"', b'"\\udfff x"', b'"\\u0000"', b"[" * 300 + b"]" * 300,
    b'{"a":' * 300 + b"1" + b"}" * 300, b"1.0e+308", b"5e-324",
]


def dumps(value: Any) -> bytes:
    """JSON of ``value``, with each :class:`Raw` written as its token."""
    tokens: list[bytes] = []

    def swap(item: Any) -> Any:
        if isinstance(item, int) and not isinstance(item, bool) and item.bit_length() > 63:
            item = Raw(str(item).encode())  # orjson writes 64-bit integers only
        if isinstance(item, Raw):
            tokens.append(item.token)
            return f"@@raw{len(tokens) - 1}@@"
        if isinstance(item, dict):
            return {k: swap(v) for k, v in item.items()}
        if isinstance(item, list):
            return [swap(v) for v in item]
        return item

    text = orjson.dumps(swap(value))
    for i, token in enumerate(tokens):
        text = text.replace(f'"@@raw{i}@@"'.encode(), token, 1)
    return text


# -- hostile values --------------------------------------------------------------------------

LIMIT_INTS = [0, -1, 1, 7, 2**31 - 1, 2**31, 2**53 + 1, 2**63 - 1, 2**63, -(2**63),
              -(2**63) - 1, 2**64, 10**30, -(10**30)]
LIMIT_FLOATS = [0.0, -0.0, 0.5, 1.0, 1.0000001, -1e-308, 5e-324, 1.7976931348623157e308,
                -1.7976931348623157e308, 1e16]
HOSTILE_TIMESTAMPS = [
    "9999-12-31T23:00:00-05:00", "0001-01-01T00:00:00+05:00", "9999-12-31T23:59:59.999999Z",
    "0001-01-01T00:00:00Z", "0000-01-01T00:00:00Z", "zzzz", "zzzzzzzzzzzzzzzzzzzz",
    "2026-02-30T00:00:00Z", "2026-01-01T24:00:00Z", "2026-12-31T23:59:60Z",
    "2026-01-01T00:00:00+24:00", "2026-01-01T00:00:00+23:59", "2026-01-01T00:00:00-23:59",
    "2026-01-01 00:00:00Z", "20260101T000000Z", "2026-W01-1T00:00:00Z", "2026-001T00:00:00Z",
    "2026-01-01T00:00Z", "2026-01-01T00:00:00", "2026-01-01", "2026-01-01T00:00:00.1234567891Z",
    "2026-01-01T00:00:00,5Z", "2026-01-01T00:00:00+0100", "2026-01-01t00:00:00z",
    "٢٠٢٦-01-01T00:00:00Z", "2026-01-01T00:00:00Z\x00", "2026-01-01T00:00:00Z ",
    " 2026-01-01T00:00:00Z", "+2026-01-01T00:00:00Z", "2026-01-01T00:00:00+05:30",
]
HOSTILE_TEXT = [
    "", " ", "\x00", "\x1b[2J\x1b]0;owned\x07", "\x9b31m", "\u202egnp.exe", "\u2028",
    "\ufeff", "a\u0301", "💥" * 300, "x" * 201, "x" * 4001, "x" * 65_537, "x" * 300_000,
    "'; DROP TABLE events; --", "../../etc/passwd", "$(rm -rf ~)", "${key}", "<text>",
    "Bearer eyJhbGciOiJIUzI1NiJ9.eyJzdWIiOiIxIn0.abc", "null", "NaN", "0 9 * * *",
    "UTC", "Europe/Lisbon", "../../../../etc/localtime", "a b", "git status", "ls; rm -rf /",
    "[{not json", "[]", '{"a": 1}', "[1e999]", "[1, 2]",
]


def json_values(max_leaves: int = 6) -> st.SearchStrategy[Any]:
    leaves = st.one_of(
        st.none(), st.booleans(), st.sampled_from(LIMIT_INTS), st.integers(),
        st.sampled_from(LIMIT_FLOATS), st.floats(allow_nan=False, allow_infinity=False),
        st.text(max_size=30), st.sampled_from(HOSTILE_TEXT), st.sampled_from(HOSTILE_TIMESTAMPS),
        st.sampled_from(RAW_TOKENS).map(Raw),
    )
    return st.recursive(
        leaves,
        lambda inner: st.one_of(st.lists(inner, max_size=4),
                                st.dictionaries(st.text(max_size=10), inner, max_size=4)),
        max_leaves=max_leaves,
    )


HOSTILE = json_values()


# -- valid events of every type ----------------------------------------------------------------

NAME = st.text("abcdefghijklmnopqrstuvwxyz0123456789-_", min_size=1, max_size=16)
"""Text every identifier rule accepts."""


def vector(floats: list[float]) -> str:
    return base64.b64encode(struct.pack(f"<{len(floats)}f", *floats)).decode()


def timestamps() -> st.SearchStrategy[str]:
    offsets = st.sampled_from(["Z", "+00:00", "+05:30", "-08:00", "+14:00", "-12:00"])
    moments = st.datetimes(min_value=_dt(1970), max_value=_dt(2100))
    return st.builds(lambda m, o: m.strftime("%Y-%m-%dT%H:%M:%S.%f") + o, moments, offsets)


def _dt(year: int) -> Any:
    from datetime import datetime

    return datetime(year, 1, 1)


CHECKED_VALUES: dict[Callable[..., Any], st.SearchStrategy[Any]] = {
    field_rules.task_id: NAME,
    field_rules.cron: st.sampled_from(["0 9 * * *", "*/15 * * * *", "30 2 * * 1-5"]),
    field_rules.timezone: st.sampled_from(["UTC", "Europe/Lisbon", "America/New_York"]),
    field_rules.prefix: st.sampled_from(["git status", "ls", "npm run test"]),
    field_rules.revoked_prefix: st.sampled_from(["git status", "ls", "sudo"]),
    field_rules.json_list: st.sampled_from(["[]", '[{"id": "call-1"}]']),
    field_rules.source_ids: st.just(KNOWN_MESSAGES[:1]),
    field_rules.proposed_facts: st.just([{"category": "c", "key": "k", "value": "v"}]),
    field_rules.namespace: st.lists(NAME, min_size=1, max_size=3),
    # sessions of their own: a retention must not erase the good neighbours' turns
    field_rules.retention_sessions: st.lists(NAME.map(lambda n: f"retained-{n}"),
                                             min_size=1, max_size=3, unique=True),
    field_rules.key_id: st.text(alphabet="0123456789abcdef", min_size=16, max_size=16),
    field_rules.sha256: st.text(alphabet="0123456789abcdef", min_size=64, max_size=64),
    field_rules.granted_ids: st.lists(NAME, min_size=1, max_size=3, unique=True),
    field_rules.rights: st.lists(st.sampled_from(sorted(field_rules.RIGHTS)), min_size=1,
                                 max_size=4, unique=True),
    field_rules.tenant: st.from_regex(tenants.NAME, fullmatch=True),
    field_rules.webhook_url: st.sampled_from(["http://127.0.0.1:9/hook",
                                              "https://example.com/memq"]),
    field_rules.type_patterns: st.lists(st.sampled_from(["fact.*", "message.appended"]),
                                        min_size=1, max_size=2),
    field_rules.webhook_secret: st.just("whsec_" + "a" * 43),
    # ids beyond any rejected row of the run: a drop must not take the rows the fuzz reads
    field_rules.rejected_ids: st.lists(st.integers(10**12, 10**12 + 1000), min_size=1,
                                       max_size=3, unique=True),
}
"""Valid values for the fields that have a rule of their own."""


def valid_value(spec: Field) -> st.SearchStrategy[Any]:
    if spec.check is not None:
        return CHECKED_VALUES[spec.check]
    if spec.choices is not None:
        return st.sampled_from(sorted(spec.choices))
    if spec.timestamp:
        return timestamps()
    if spec.kind is bool:
        return st.booleans()
    if spec.kind is int:
        return st.integers(int(spec.low or 0), int(min(spec.high or 1000, 1000)))
    if spec.kind is float:
        return st.floats(spec.low or 0.0, spec.high or 1000.0)
    if spec.kind is list:
        return st.lists(st.text(max_size=8), max_size=3)
    if spec.kind is dict:
        return st.dictionaries(NAME, st.text(max_size=20), max_size=3)
    if spec.identifier:
        return NAME
    return st.text(st.characters(blacklist_categories=["Cs"], blacklist_characters="\x00"),
                   min_size=1, max_size=40)


FIXED: dict[str, Callable[[], dict[str, Any]]] = {
    # what an event must refer to, to be applicable
    EventType.MESSAGE_EMBEDDED: lambda: {"message_id": KNOWN_MESSAGES[1], "model": "m",
                                         "dim": 2, "vector_b64": vector([0.6, 0.8])},
    EventType.MESSAGE_EMBEDDING_FAILED: lambda: {"message_id": KNOWN_MESSAGES[1]},
    EventType.MESSAGE_IMPORTED: lambda: {"embedding_b64": None, "embedding_json": None,
                                         "embedding_dim": None},
    EventType.SESSION_CONSOLIDATED: lambda: {"content": "s", "summary_id": uuid7()},
    EventType.MACRO_USED: lambda: {"macro_id": 1},
    EventType.TASK_CHANGED: lambda: {"task_id": KNOWN_TASK},
    EventType.TASK_FIRED: lambda: {"task_id": KNOWN_TASK},
    EventType.FACT_IMPORTED: lambda: {"fact_id": 1000 + next(_COUNTER)},
    EventType.MACRO_IMPORTED: lambda: {"macro_id": 1000 + next(_COUNTER),
                                       "trigger_args_pattern": "*"},
}
_COUNTER = iter(range(10**9))
FRESH_IDS = {"message_id", "summary_id", "task_id"}
"""Fields that name a new thing: drawn fresh, so that a valid event applies."""


@st.composite
def valid_events(draw: st.DrawFn, etype: str) -> dict[str, Any]:
    schema = SCHEMAS[etype]
    payload: dict[str, Any] = {}
    for name, spec in schema.fields.items():
        if not spec.required and draw(st.booleans()):
            continue
        if name in FRESH_IDS:
            payload[name] = f"fz-{uuid.uuid4().hex[:12]}"
        else:
            payload[name] = draw(valid_value(spec))
    payload.update(FIXED.get(etype, dict)())
    payload = {k: v for k, v in payload.items() if k in schema.fields}
    if etype == EventType.SESSION_FORGOTTEN:
        session: str | None = f"fz-forget-{uuid.uuid4().hex[:8]}"  # not SESSION's data
    else:
        session = SESSION if schema.needs_session else draw(st.sampled_from([None, SESSION]))
    return {"id": uuid7(), "type": etype, "v": schema.version, "session_id": session,
            "created_at": draw(timestamps()), "payload": payload}


# -- one thing wrong -----------------------------------------------------------------------------

ENVELOPE_KEYS = sorted(ENVELOPE_FIELDS)


@dataclass(frozen=True)
class Case:
    """One stream entry, and what was done to a valid event to make it."""

    how: str
    fields: dict[bytes, bytes]
    stream: str = names.INBOX_STREAM

    def __repr__(self) -> str:
        shown = {k.decode(): v[:300] for k, v in self.fields.items()}
        return f"Case({self.how!r}, {shown!r})"


def event_case(how: str, event: Any, **extra: bytes) -> Case:
    body = event if isinstance(event, bytes) else dumps(event)
    return Case(how, {names.EVENT_FIELD: body, **{k.encode(): v for k, v in extra.items()}})


@st.composite
def cases(draw: st.DrawFn) -> Case:
    event = draw(st.sampled_from(sorted(SCHEMAS)).flatmap(valid_events))
    payload = event["payload"]
    # Mostly a stream whose sender may send this event (or the authority check would end
    # most entries before their fields are looked at), sometimes any stream.
    allowed = sorted(authority.STREAM_OF_ROLE[role]
                     for role in authority.right_for(event["type"], payload).roles)
    stream = draw(st.one_of(st.sampled_from(allowed), st.sampled_from(STREAMS)))
    kind = draw(st.sampled_from([
        "valid", "envelope value", "envelope gone", "envelope extra", "payload value",
        "payload gone", "payload extra", "raw bytes", "stream field", "id reused",
    ]))
    how = f"{event['type']}: {kind}"
    if kind == "envelope value":
        key = draw(st.sampled_from(ENVELOPE_KEYS))
        event[key] = draw(HOSTILE)
        how += f" {key}"
    elif kind == "envelope gone":
        key = draw(st.sampled_from(ENVELOPE_KEYS))
        del event[key]
        how += f" {key}"
    elif kind == "envelope extra":
        event[draw(st.text(max_size=12))] = draw(HOSTILE)
    elif kind == "payload value" and payload:
        key = draw(st.sampled_from(sorted(payload)))
        payload[key] = draw(HOSTILE)
        how += f" {key}"
    elif kind == "payload gone" and payload:
        key = draw(st.sampled_from(sorted(payload)))
        del payload[key]
        how += f" {key}"
    elif kind == "payload extra":
        payload[draw(st.text(max_size=12))] = draw(HOSTILE)
    elif kind == "id reused":
        event["id"] = KNOWN_EVENT["id"]
    raw = dumps(event)
    if kind == "raw bytes":
        at = draw(st.integers(0, len(raw)))
        raw = raw[:at] + draw(st.binary(max_size=4)) + raw[at + draw(st.integers(0, 3)):]
    fields = {names.EVENT_FIELD: raw}
    if kind == "stream field":
        name = draw(st.sampled_from([names.REPLAY_FIELD, b"cmd", b"", b"event ", b"\xff"]))
        fields[name] = draw(st.one_of(
            st.binary(max_size=24),
            st.sampled_from([b"1", b"0", b"-1", b"9223372036854775807", b"9223372036854775808",
                             b"18446744073709551616", b"1" * 5000, b"\xd9\xa3", b" 1"]),
        ))
        if draw(st.booleans()):
            del fields[names.EVENT_FIELD]
        how += f" {name!r}"
    return Case(how, fields, stream)


# -- the writer under test ---------------------------------------------------------------------


class Harness:
    def __init__(self, directory: Path) -> None:
        self.server = RedisServer(directory)
        self.server.start()
        self.config = Config(redis_url=self.server.url, db_path=str(directory / "memq.db"))
        self.redis = redis.Redis.from_url(self.server.url)
        self.writer = WriterThread(self.config)
        self.writer.start()
        self.deaths = 0

    def close(self) -> None:
        self.writer.stop()
        self.server.stop()

    def alive(self) -> bool:
        thread, writer = self.writer.thread, self.writer.writer
        return thread is not None and thread.is_alive() and writer is not None

    def revive(self) -> None:
        """After a failure, a fresh writer, so that shrinking compares like with like."""
        self.deaths += 1
        self.writer.stop()
        self.writer = WriterThread(self.config)
        self.writer.start()

    def send(self, entries: list[Case]) -> list[bytes]:
        """XADD every entry in one pipeline; their stream ids."""
        pipe = self.redis.pipeline(transaction=False)
        for entry in entries:
            pipe.xadd(entry.stream, entry.fields)  # type: ignore[arg-type]
        return list(pipe.execute())

    def wait(self, timeout: float = 30.0) -> bool:
        """Whether the writer acknowledged everything sent to every stream."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if not self.alive():
                return False
            if all(self._drained(stream) for stream in STREAMS):
                return True
            time.sleep(0.005)
        return False

    def _drained(self, stream: str) -> bool:
        # Acknowledged entries are deleted; a stream that was never created is empty too.
        return int(self.redis.xlen(stream)) == 0

    def read(self, sql: str, *args: Any) -> list[tuple[Any, ...]]:
        conn = apsw.Connection(self.config.db_path, flags=apsw.SQLITE_OPEN_READONLY)
        try:
            return conn.execute(sql, args).fetchall()
        finally:
            conn.close()


def neighbour() -> tuple[str, Case]:
    message_id = uuid7()
    event = {"id": uuid7(), "type": "message.appended", "v": 1, "session_id": "fz-neighbours",
             "created_at": now_rfc3339(),
             "payload": {"message_id": message_id, "role": "user", "content": "neighbour",
                         "importance": 0.5}}
    return message_id, event_case("neighbour", event)


def setup_events() -> list[dict[str, Any]]:
    """What the valid events refer to: messages, a task, a macro, an event to reuse."""
    def ev(etype: str, payload: dict[str, Any], session: str | None = SESSION) -> dict[str, Any]:
        return {"id": uuid7(), "type": etype, "v": 1, "session_id": session,
                "created_at": now_rfc3339(), "payload": payload}

    messages = [ev("message.appended", {"message_id": mid, "role": "user",
                                         "content": "a long old turn " * 20, "importance": 0.5})
                for mid in KNOWN_MESSAGES]
    task = ev("task.scheduled", {
        "task_id": KNOWN_TASK, "name": "fuzz", "schedule": "daily at 9am",
        "cron_expr": "0 9 * * *", "prompt": "p", "oneshot": False, "trusted": False,
        "tz": "UTC", "source": "tool"}, None)
    calls = [ev("macro.observed", {"tool": tool, "args": {"path": "a.py"}})
             for tool in ("read_file", "edit_file")]
    return [*messages, task, *calls, KNOWN_EVENT]


@pytest.fixture(scope="module")
def harness(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Harness]:
    running = Harness(tmp_path_factory.mktemp("fuzz-inbox"))
    try:
        running.send([dataclasses.replace(event_case("setup", e), stream=names.ADMIN_INBOX_STREAM)
                      for e in setup_events()])
        assert running.wait(), "the writer did not take the setup events"
        assert running.read("SELECT count(*) FROM rejected_events") == [(0,)]
        yield running
    finally:
        running.close()


# -- the property --------------------------------------------------------------------------------


def check_entries(harness: Harness, entries: list[Case]) -> None:
    if not harness.alive():
        harness.revive()
    batch: list[Case] = []
    expected: list[str] = []
    for entry in entries:
        message_id, good = neighbour()
        batch += [entry, good]
        expected.append(message_id)
    sent = harness.send(batch)
    drained = harness.wait()
    alive = harness.alive()
    if not alive:
        harness.revive()
    assert alive, f"the writer stopped ({harness.deaths} so far)"
    assert drained, "the writer did not acknowledge every entry"
    assert harness.redis.get(names.WRITER_HEARTBEAT_KEY) is not None
    marks = ", ".join("?" * len(expected))
    [(committed,)] = harness.read(f"SELECT count(*) FROM messages WHERE id IN ({marks})",
                                  *expected)
    assert committed == len(expected), "a good neighbour was not committed"
    ids = [stream_id.decode() for stream_id in sent[::2]]
    marks = ", ".join("?" * len(ids))
    reasons = [r for (r,) in harness.read(
        f"SELECT reason FROM rejected_events WHERE stream_id IN ({marks})", *ids)]
    for reason in reasons:
        assert len(reason) <= MAX_REASON_CHARS
        assert not re.search(r"[\x00-\x08\x0b-\x1f\x7f-\x9f]", reason)
    figures.add("fuzzed", len(entries))
    figures.add("fuzzed_set_aside", len(reasons))


def probe(**changes: Any) -> Case:
    """A message.appended with ``changes`` to its envelope (what the probe sent)."""
    event = {"id": uuid7(), "type": "message.appended", "v": 1, "session_id": SESSION,
             "created_at": now_rfc3339(),
             "payload": {"message_id": uuid7(), "role": "user", "content": "x",
                         "importance": 0.5}}
    return event_case(f"probe {sorted(changes)}", {**event, **changes})


def imported(**changes: Any) -> Case:
    payload = {"message_id": uuid7(), "role": "user", "content": "old", "importance": 0.5,
               "created_at": "2024-01-01T00:00:00Z", **changes}
    event = {"id": uuid7(), "type": "message.imported", "v": 1, "session_id": SESSION,
             "created_at": now_rfc3339(), "payload": payload}
    return event_case(f"imported {sorted(changes)}", event)


@pytest.mark.timeout(300 + EXAMPLES)  # a long hunt takes about a tenth of a second an example
@seed(SEED)
@settings(max_examples=EXAMPLES, deadline=None, database=None, print_blob=True,
          suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large,
                                 HealthCheck.large_base_example])
@given(entries=st.lists(cases(), min_size=1, max_size=6))
# What the outside probe stopped the writer, or broke reads, with: one entry each.
@example(entries=[probe(created_at="9999-12-31T23:00:00-05:00")])
@example(entries=[probe(created_at="0001-01-01T00:00:00+05:00")])
@example(entries=[event_case("replay_of beyond int64", probe().fields[names.EVENT_FIELD],
                             replay_of=b"18446744073709551616")])
@example(entries=[imported(tool_calls_json="[{not json")])
@example(entries=[imported(created_at="zzzz")])
@example(entries=[probe(created_at="2026-01-01 00:00:00+02:00")])
def test_no_single_entry_stops_the_writer(harness: Harness, entries: list[Case]) -> None:
    check_entries(harness, entries)


def test_every_event_type_is_fuzzed() -> None:
    """A new event type is fuzzed as soon as it is in the vocabulary: its valid events
    come from its schema, and only references need a line in FIXED."""
    assert set(SCHEMAS) == set(EventType)  # cases() draws its type from SCHEMAS
    for spec in (f for s in SCHEMAS.values() for f in s.fields.values()):
        assert spec.check is None or spec.check in CHECKED_VALUES, spec


def test_the_log_still_rebuilds_to_the_same_rows(harness: Harness) -> None:
    """After everything above: projections equal the log, and the file is sound."""
    assert harness.deaths == 0
    assert harness.read("PRAGMA integrity_check") == [("ok",)]
    assert rebuild.check(harness.config.db_path) == []
