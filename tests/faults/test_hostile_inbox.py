"""Raw entries pushed straight into ``memq:inbox``, bypassing the client: each bad one is set
aside with the exact reason, the good (if odd) ones are applied verbatim, and the writer
never stops. All entries go in together, between good appends, so they share batches:
one bad entry must not take its neighbours down with it."""

from __future__ import annotations

import base64
import re
import struct
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import apsw
import orjson
import pytest
import redis

from memq import MemoryClient, names
from memq.clock import now_rfc3339, uuid7
from memq.config import Config
from memq.store import rebuild
from memq.store.write.rejected import MAX_REASON_CHARS
from memq.testing import RedisServer, WriterThread
from tests.faults import figures
from tests.faults.hostile import SQL_LOOKING

pytestmark = [pytest.mark.faults, pytest.mark.redis]

KNOWN = "01a00000-0000-7000-8000-000000000001"
"""A message committed before the hostile entries, for events that refer to one."""

ACCEPTED = None


@dataclass(frozen=True)
class Entry:
    label: str
    fields: dict[bytes, bytes]
    reason: str | None
    """A fragment of the reason it is set aside with, or ACCEPTED."""


def envelope(**changes: Any) -> dict[str, Any]:
    """A valid message.appended event as a dict; ``changes`` replace or add keys."""
    base: dict[str, Any] = {
        "id": uuid7(), "type": "message.appended", "v": 1, "session_id": "raw",
        "created_at": now_rfc3339(),
        "payload": {"message_id": uuid7(), "role": "user", "content": "hi", "importance": 0.5},
    }
    base.update(changes)
    return base


def payload(**changes: Any) -> dict[str, Any]:
    data = envelope()
    data["payload"] = {**data["payload"], **changes}
    return data


def without(data: dict[str, Any], key: str, inner: bool = False) -> dict[str, Any]:
    data = {**data, "payload": dict(data["payload"])}
    (data["payload"] if inner else data).pop(key)
    return data


def event(etype: str, body: dict[str, Any], session: str | None = None, v: int = 1) -> bytes:
    return orjson.dumps({"id": uuid7(), "type": etype, "v": v, "session_id": session,
                         "created_at": now_rfc3339(), "payload": body})


def vector(floats: list[float]) -> str:
    return base64.b64encode(struct.pack(f"<{len(floats)}f", *floats)).decode()


def deep_tool_calls(depth: int) -> bytes:
    """An append whose tool_calls nest ``depth`` lists deep (deeper than orjson writes)."""
    raw = orjson.dumps(payload(tool_calls="DEEP"))
    return raw.replace(b'"DEEP"', b"[" * depth + b"1" + b"]" * depth)


def entry(label: str, raw: bytes | dict[str, Any], reason: str | None) -> Entry:
    body = raw if isinstance(raw, bytes) else orjson.dumps(raw)
    return Entry(label, {names.EVENT_FIELD: body}, reason)


def envelope_entries() -> list[Entry]:
    e = envelope
    return [
        entry("not JSON", b"{nope", "not valid JSON"),
        entry("invalid UTF-8", b'{"id": "\xff\xfe"}', "not valid JSON"),
        entry("a lone surrogate escape", b'{"id": "\\ud800"}', "not valid JSON"),
        entry("JSON null", b"null", "event must be a JSON object, got NoneType"),
        entry("a JSON number", b"12", "event must be a JSON object, got int"),
        entry("a JSON string", b'"event"', "event must be a JSON object, got str"),
        entry("a JSON array", b"[1, 2]", "event must be a JSON object, got list"),
        entry("NaN", b"NaN", "not valid JSON"),
        entry("nested 100000 deep", b"[" * 100_000 + b"]" * 100_000, "not valid JSON"),
        entry("over 1 MB", e(payload={"content": "x" * 1_100_000}), "over the 1048576 limit"),
        entry("an unknown top-level field", e(evil=1), "unknown event field(s): evil"),
        entry("a __proto__ field", e(__proto__={"admin": True}),
              "unknown event field(s): __proto__"),
        entry("no type", without(e(), "type"), "type must be a non-empty string, got None"),
        entry("type an int", e(type=5), "type must be a non-empty string, got 5"),
        entry("type empty", e(type=""), "type must be a non-empty string, got ''"),
        entry("type unknown", e(type="message.exploded"), "unknown event type 'message.exploded'"),
        entry("type SQL", e(type="x'; DROP TABLE events; --"), "unknown event type"),
        entry("type of 1000 characters", e(type="t" * 1000),
              "type is 1000 characters, over the 200 limit"),
        entry("no version", without(e(), "v"), "v must be a positive integer, got None"),
        *[entry(f"version {v!r}", e(v=v), f"v must be a positive integer, got {v!r}")
          for v in (0, -1, "1", True, 1.0, 1.5, None, [1])],
        *[entry(f"version {v}", e(v=v), f"unsupported version {v} (this writer knows 1)")
          for v in (2, 99, 2**63 - 1, 2**64 - 1)],
        entry("version beyond 64 bits",
              orjson.dumps(e(v="BIG")).replace(b'"BIG"', b"18446744073709551616"),
              "v must be a positive integer, got 1.8446744073709552e+19"),
        entry("no id", without(e(), "id"), "id must be a string, got NoneType"),
        entry("id an int", e(id=7), "id must be a string, got int"),
        entry("id empty", e(id=""), "id must not be empty"),
        entry("id too long", e(id="i" * 201), "id is 201 characters, over the 200 limit"),
        entry("id with NUL", e(id="a\u0000b"), "id contains a control character"),
        entry("no session", without(e(), "session_id"), "session_id must be a string"),
        entry("session an object", e(session_id={"$gt": ""}),
              "session_id must be a string, got dict"),
        entry("session too long", e(session_id="s" * 201),
              "session_id is 201 characters, over the 200 limit"),
        entry("session with an escape", e(session_id="s\u001b[2J"),
              "session_id contains a control character"),
        entry("no created_at", without(e(), "created_at"),
              "created_at must be an RFC3339 string, got None"),
        entry("created_at naive", e(created_at="2026-01-01T00:00:00"), "no time zone offset"),
        entry("created_at garbage", e(created_at="the day after tomorrow"), "not RFC3339"),
        entry("created_at with NUL", e(created_at="2026-01-01T00:00:00Z\u0000<b>"),
              "created_at is not RFC3339"),
        entry("created_at an int", e(created_at=1767225600),
              "created_at must be an RFC3339 string, got 1767225600"),
        entry("no payload", without(e(), "payload"), "payload must be a JSON object"),
        entry("payload a list", e(payload=[1]), "payload must be a JSON object"),
        entry("payload a string", e(payload="{}"), "payload must be a JSON object"),
    ]


def message_entries() -> list[Entry]:
    p = payload
    appended = "message.appended: payload."
    return [
        entry("unknown payload field", p(evil=1), "unknown payload field(s): evil"),
        entry("no role", without(p(), "role", inner=True), f"{appended}role is missing"),
        entry("role admin", p(role="admin"),
              f"{appended}role must be one of assistant, system, tool, user"),
        entry("message_id an int", p(message_id=5), f"{appended}message_id must be a string"),
        entry("message_id too long", p(message_id="m" * 201), "over the 200 limit"),
        entry("content an int", p(content=5), f"{appended}content must be a string, got int"),
        entry("content null", p(content=None), f"{appended}content must be a string, got NoneType"),
        entry("content with NUL", p(content="a\u0000b"), f"{appended}content contains a NUL"),
        entry("content over 64 KB", p(content="x" * 65537),
              f"{appended}content is 65537 bytes, over the 65536 byte limit"),
        entry("importance a string", p(importance="high"),
              f"{appended}importance must be a number, got str"),
        entry("importance 2", p(importance=2),
              f"{appended}importance must be between 0.0 and 1.0, got 2"),
        entry("importance negative", p(importance=-1),
              "importance must be between 0.0 and 1.0, got -1"),
        entry("importance beyond 64 bits", p(importance=2**64 - 1),
              f"{appended}importance must be between 0.0 and 1.0, got 18446744073709551615"),
        entry("tool_calls a string", p(tool_calls="[]"), f"{appended}tool_calls must be a list"),
        # Readers wrap what they return in a few more levels, and JSON encoders stop at
        # about 255: what the writer applies, every reader must be able to return.
        entry("tool_calls 500 deep", deep_tool_calls(500),
              "message.appended: payload nests more than 64 levels of objects and lists"),
        entry("tool_calls 200 deep", deep_tool_calls(200),
              "message.appended: payload nests more than 64 levels of objects and lists"),
        entry("tool_calls 62 deep", deep_tool_calls(62), ACCEPTED),
        entry("duplicate message id", p(message_id=KNOWN), f"message {KNOWN} already exists"),
        *[entry(f"SQL-looking content {i}", p(content=text), ACCEPTED)
          for i, text in enumerate(SQL_LOOKING)],
        *[entry(f"SQL-looking session {i}", envelope(session_id=text), ACCEPTED)
          for i, text in enumerate(SQL_LOOKING)],
        entry("imported with a JSON embedding that is not JSON",
              event("message.imported", {
                  "message_id": uuid7(), "role": "user", "content": "old", "importance": 0.5,
                  "created_at": now_rfc3339(), "embedding_json": "[1, 2"}, "raw"),
              "message.imported: the embedding is not a list of numbers"),
        entry("imported with a nested JSON embedding",
              event("message.imported", {
                  "message_id": uuid7(), "role": "user", "content": "old", "importance": 0.5,
                  "created_at": now_rfc3339(), "embedding_json": "[[1, 2], [3, 4]]"}, "raw"),
              "message.imported: the embedding is not a flat list of 1-8192 numbers"),
        entry("imported with a JSON embedding of words",
              event("message.imported", {
                  "message_id": uuid7(), "role": "user", "content": "old", "importance": 0.5,
                  "created_at": now_rfc3339(), "embedding_json": '["a", "b"]'}, "raw"),
              "message.imported: the embedding is not a list of numbers"),
    ]


def other_entries() -> list[Entry]:
    embedded = "message.embedded"
    model = "test-model"  # memq knows no size for it: the vector's own checks apply

    def emb(**body: Any) -> bytes:
        base = {"message_id": KNOWN, "model": model, "dim": 2, "vector_b64": vector([0.6, 0.8])}
        return event(embedded, {**base, **body})

    return [
        entry("vector not base64", emb(vector_b64="not base64!"), "vector is not valid base64"),
        entry("vector of the wrong size for its model",
              emb(model="sentence-transformers/all-MiniLM-L6-v2"),
              "vector has 2 dims, but sentence-transformers/all-MiniLM-L6-v2 gives 384"),
        entry("vector not of unit length", emb(vector_b64=vector([3.0, 4.0])),
              "vector must have unit length (an embedding's), got 5"),
        entry("vector of zeros", emb(vector_b64=vector([0.0, 0.0])),
              "vector must have unit length (an embedding's), got 0"),
        entry("vector shorter than dim", emb(dim=384, vector_b64=vector([0.1] * 383)),
              "vector has 1532 bytes, expected 1536 for 384 dims"),
        entry("vector with NaN", emb(vector_b64=vector([float("nan"), 1.0])),
              "vector holds NaN or infinity"),
        entry("vector with infinity", emb(vector_b64=vector([float("inf"), 1.0])),
              "vector holds NaN or infinity"),
        entry("dim 0", emb(dim=0), f"{embedded}: payload.dim must be between 1 and 8192, got 0"),
        entry("dim 10000", emb(dim=10_000), "payload.dim must be between 1 and 8192, got 10000"),
        entry("vector over 64 KB", emb(vector_b64="A" * 65540),
              "payload.vector_b64 is 65540 characters, over the 65536 limit"),
        entry("embedding of an unknown message", emb(message_id="nope"), "unknown message nope"),
        entry("failure of an unknown message",
              event("message.embedding_failed", {"message_id": "nope", "model": model,
                                                 "error": "boom"}), "unknown message nope"),
        entry("fact source system", event("fact.set", {"category": "c", "key": "k", "value": "v",
                                                       "source": "system"}),
              "fact.set: payload.source must be one of agent, user"),
        entry("fact value with NUL", event("fact.set", {"category": "c", "key": "k",
                                                        "value": "\u0000", "source": "agent"}),
              "fact.set: payload.value contains a NUL character"),
        entry("fact category with a newline",
              event("fact.set", {"category": "c\n", "key": "k", "value": "v", "source": "agent"}),
              "category contains a control character"),
        entry("fact force a string", event("fact.set", {"category": "c", "key": "k", "value": "v",
                                                        "source": "agent", "force": "yes"}),
              "fact.set: payload.force must be a boolean, got str"),
        entry("macro_id beyond 64 bits", event("macro.used", {"macro_id": 2**64 - 1}),
              "macro.used: payload.macro_id is out of the 64-bit integer range"),
        entry("macro args a list", event("macro.observed", {"tool": "t", "args": []}, "raw"),
              "macro.observed: payload.args must be an object, got list"),
        entry("prefix with a command list",
              event("prefix.allowed", {"prefix": "ls; rm -rf /"}),
              "prefix contains a shell metacharacter ';'"),
        entry("task with a cron that is not one", event("task.scheduled", {
            "task_id": uuid7(), "name": "n", "schedule": "s", "cron_expr": "every blue moon",
            "prompt": "p", "oneshot": False, "trusted": False, "tz": "UTC", "source": "tool"}),
              "cron expression 'every blue moon' has 3 fields, expected 5"),
        entry("task in an unknown time zone", event("task.scheduled", {
            "task_id": uuid7(), "name": "n", "schedule": "s", "cron_expr": "0 9 * * *",
            "prompt": "p", "oneshot": False, "trusted": False, "tz": "Mars/Olympus",
            "source": "tool"}), "Mars/Olympus"),
        entry("a replay of a missing rejection",
              b"", "entry has no 'event' field"),
        *[Entry(f"replay_of {value!r}", {names.EVENT_FIELD: orjson.dumps(envelope()),
                                         names.REPLAY_FIELD: value},
                "replay_of must be a rejected event's id")
          for value in (b"abc", b"0", b"-1", b"+1", b" 1", b"1_0", b"\xd9\xa3",
                        b"9223372036854775808", b"18446744073709551616", b"1" * 5000)],
        Entry("only foreign fields", {b"cmd": b"FLUSHALL"}, "entry has no 'event' field"),
        Entry("a foreign field beside the event",
              {names.EVENT_FIELD: orjson.dumps(envelope()), b"cmd": b"FLUSHALL"},
              "unknown stream field(s): cmd"),
    ]


def imported(**changes: Any) -> bytes:
    body = {"message_id": uuid7(), "role": "user", "content": "old", "importance": 0.5,
            "created_at": "2024-01-01T10:00:00+02:00", **changes}
    return event("message.imported", body, "raw")


def probe_entries() -> list[Entry]:
    """What an outside probe stopped the writer with, or broke reads with, one entry each."""
    e = envelope
    return [
        entry("a user id with an escape", payload(user_id="ann\u001b[2J"),
              "message.appended: payload.user_id contains a control character"),
        entry("an agent id that is blank", payload(agent_id="  "),
              "message.appended: payload.agent_id must not be empty"),
        entry("a fact of a user id with a newline", event("fact.set", {
            "category": "c", "key": "k", "value": "v", "source": "agent", "user_id": "a\nb"}),
              "fact.set: payload.user_id contains a control character"),
        entry("created_at beyond year 9999 in UTC", e(created_at="9999-12-31T23:00:00-05:00"),
              "created_at is out of range (years 1-9999 in UTC)"),
        entry("created_at before year 1 in UTC", e(created_at="0001-01-01T00:00:00+05:00"),
              "created_at is out of range (years 1-9999 in UTC)"),
        entry("created_at a week date", e(created_at="2026-W01-1T00:00:00Z"), "not RFC3339"),
        entry("created_at without separators", e(created_at="20260101T000000Z"),
              "not RFC3339"),
        entry("created_at with a space", e(created_at="2026-01-01 00:00:00Z"), "not RFC3339"),
        entry("created_at without seconds", e(created_at="2026-01-01T00:00Z"), "not RFC3339"),
        entry("created_at in Arabic-Indic digits", e(created_at="٢٠٢٦-01-01T00:00:00Z"),
              "not RFC3339"),
        entry("created_at a leap second", e(created_at="2026-12-31T23:59:60Z"), "leap second"),
        entry("created_at an offset of 24 hours", e(created_at="2026-01-01T00:00:00+24:00"),
              "no such date or time"),
        entry("created_at with an offset", e(created_at="2026-01-01T00:00:00+05:30"), ACCEPTED),
        entry("imported tool_calls_json not JSON", imported(tool_calls_json="[{not json"),
              "message.imported: payload.tool_calls_json is not valid JSON"),
        entry("imported tool_calls_json not a list", imported(tool_calls_json='{"a": 1}'),
              "payload.tool_calls_json must hold a JSON list, got dict"),
        entry("imported created_at zzzz", imported(created_at="zzzz"),
              "payload.created_at must be an RFC3339 string"),
        entry("imported created_at zzzz, long", imported(created_at="zzzzzzzzzzzz"),
              "payload.created_at is not RFC3339"),
        entry("imported created_at beyond year 9999",
              imported(created_at="9999-12-31T23:59:59-00:01"), "is out of range"),
        entry("imported consolidated_at not a time", imported(consolidated_at="soon"),
              "payload.consolidated_at must be an RFC3339 string"),
        entry("imported embedding of infinities", imported(embedding_json="[1e999, 1]"),
              "message.imported: the embedding"),
        entry("imported tool_name with an escape", imported(tool_name="ls\u001b[2J"),
              "payload.tool_name contains a control character"),
        entry("imported", imported(), ACCEPTED),
        entry("task run_at beyond year 9999", event("task.scheduled", {
            "task_id": "probe-far", "name": "n", "schedule": "s", "cron_expr": "0 9 * * *",
            "prompt": "p", "oneshot": True, "trusted": False, "tz": "UTC", "source": "tool",
            "run_at": "9999-12-31T23:59:59-12:00"}), "payload.run_at is out of range"),
        entry("task fired in year 9999", event("task.fired", {
            "task_id": "probe-task", "fired_at": "9999-12-31T23:59:59Z"}),
              "the next run after 9999-12-31T23:59:59+00:00 is outside the years 1-9999"),
        entry("a task id that is not one", event("task.deleted", {"task_id": "a b"}),
              "payload.task_id must be 1-100 letters"),
        entry("a consolidation request from year 1", {
            **orjson.loads(event("consolidation.requested", {"min_age_hours": 1.0})),
            "created_at": "0001-01-01T00:00:00Z"}, ACCEPTED),
        entry("an event id used again with other content",
              orjson.dumps({**envelope(), "id": REUSED}),
              f"event id {REUSED} is already in the log with different content"),
        entry("an event id used again with the same content", orjson.dumps(REUSED_EVENT),
              ACCEPTED),
        entry("a reason as long as the payload allows",
              e(payload={f"field{i}-{'x' * 100}": 1 for i in range(5000)}),
              "unknown payload field(s)"),
    ]


REUSED = "01a00000-0000-7000-8000-0000000000e1"
"""An event id committed before the hostile entries, then sent again."""
REUSED_EVENT = {**envelope(), "id": REUSED}

ENTRIES = envelope_entries() + message_entries() + other_entries() + probe_entries()


@dataclass
class Outcome:
    reasons: dict[str, str]
    """stream id -> reason, for the entries set aside"""
    ids: dict[str, str]
    """label -> stream id"""
    writer: WriterThread
    config: Config


@pytest.fixture(scope="module")
def outcome(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Outcome]:
    directory = tmp_path_factory.mktemp("hostile-inbox")
    server = RedisServer(directory)
    server.start()
    config = Config(redis_url=server.url, db_path=str(Path(directory) / "memq.db"))
    writer = WriterThread(config)
    writer.start()
    try:
        yield _push_all(config, writer)
    finally:
        writer.stop()
        server.stop()


STREAM = names.ADMIN_INBOX_STREAM
"""The admin's inbox, which may carry every type: what is judged here is the shape."""


def _push_all(config: Config, writer: WriterThread) -> Outcome:
    broker = redis.Redis.from_url(config.redis_url)
    with MemoryClient(config=config) as client:
        known = envelope()
        known["payload"]["message_id"] = KNOWN
        broker.xadd(STREAM, {names.EVENT_FIELD: orjson.dumps(known)})
        broker.xadd(STREAM, {names.EVENT_FIELD: orjson.dumps(REUSED_EVENT)})
        broker.xadd(STREAM, {names.EVENT_FIELD: event("task.scheduled", {
            "task_id": "probe-task", "name": "n", "schedule": "daily at 9am",
            "cron_expr": "0 9 * * *", "prompt": "p", "oneshot": False, "trusted": False,
            "tz": "UTC", "source": "tool"})})
        client.append("raw", "user", "before")
        client.flush(30)
        ids = {}
        pipe = broker.pipeline(transaction=False)
        for item in ENTRIES:
            pipe.xadd(STREAM, item.fields)
            neighbour = payload(content="neighbour")
            pipe.xadd(STREAM, {names.EVENT_FIELD: orjson.dumps(neighbour)})
        replies = pipe.execute()
        ids = {item.label: replies[2 * i].decode() for i, item in enumerate(ENTRIES)}
        client.append("raw", "user", "after")
        client.flush(60)
    conn = apsw.Connection(config.db_path, flags=apsw.SQLITE_OPEN_READONLY)
    reasons = dict(conn.execute("SELECT stream_id, reason FROM rejected_events").fetchall())
    conn.close()
    return Outcome(reasons, ids, writer, config)


@pytest.mark.parametrize("item", ENTRIES, ids=[e.label for e in ENTRIES])
def test_hostile_inbox_entry(item: Entry, outcome: Outcome) -> None:
    reason = outcome.reasons.get(outcome.ids[item.label])
    if item.reason is ACCEPTED:
        assert reason is None
    else:
        assert reason is not None, "a bad entry was applied"
        assert item.reason in reason
    figures.add("bad_inputs")


CANONICAL = re.compile(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{6}Z")
TIMESTAMPS = {
    "events": ("created_at", "recorded_at"),
    "messages": ("created_at", "consolidated_at"),
    "scheduled_tasks": ("next_run_at", "last_run_at", "created_at", "updated_at"),
}


def test_every_stored_timestamp_is_canonical_utc(outcome: Outcome) -> None:
    """Whatever offsets came in, the store holds one form, so that text order is time order."""
    conn = apsw.Connection(outcome.config.db_path, flags=apsw.SQLITE_OPEN_READONLY)
    try:
        for table, columns in TIMESTAMPS.items():
            for column in columns:
                values = [v for (v,) in conn.execute(f"SELECT {column} FROM {table}")]
                assert all(v is None or CANONICAL.fullmatch(v) for v in values), (table, column)
        [(shifted,)] = conn.execute(
            "SELECT created_at FROM events WHERE created_at = '2025-12-31T18:30:00.000000Z'")
    finally:
        conn.close()
    assert shifted  # "2026-01-01T00:00:00+05:30", stored as the same instant in UTC


def test_the_writer_survived_and_the_good_neighbours_were_applied(outcome: Outcome) -> None:
    assert outcome.writer.thread is not None
    assert outcome.writer.thread.is_alive()
    conn = apsw.Connection(outcome.config.db_path, flags=apsw.SQLITE_OPEN_READONLY)
    try:
        neighbours = conn.execute(
            "SELECT count(*) FROM messages WHERE content = 'neighbour'").fetchone()[0]
        stored = {row[0] for row in conn.execute("SELECT content FROM messages")}
        assert conn.execute("PRAGMA integrity_check").fetchone()[0] == "ok"
    finally:
        conn.close()
    assert neighbours == len(ENTRIES)  # every good neighbour of a bad entry was applied
    assert max(map(len, outcome.reasons.values())) <= MAX_REASON_CHARS
    assert set(SQL_LOOKING) <= stored
    assert len(outcome.reasons) == sum(1 for e in ENTRIES if e.reason is not ACCEPTED)
    assert rebuild.check(outcome.config.db_path) == []
