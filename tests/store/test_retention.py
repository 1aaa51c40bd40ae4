"""Retention of forgotten data: ``retention.applied`` removes the records of old forgets.

The applier is driven through the writer's batch code (tests/store/eventlog.py); the
periodic pass runs in a real writer, with a real Redis and a client.
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import pytest
import redis

from memq import MemoryClient
from memq.cli import main
from memq.clock import uuid7
from memq.config import Config, RetentionConfig, WriterConfig
from memq.errors import ConfigError
from memq.events import Event, EventType
from memq.testing import WriterThread
from tests.store.eventlog import EventLog, at, event


def append(session: str, text: str, minute: int, **owner: Any) -> Event:
    return event(EventType.MESSAGE_APPENDED, {
        "message_id": uuid7(), "role": "user", "content": text, "importance": 0.5, **owner},
        session=session, created_at=at(minute))


def forgotten_records(log: EventLog) -> dict[str, int]:
    return {
        "tombstones": log.rows("SELECT count(*) FROM events WHERE erased_by IS NOT NULL")[0][0],
        "forgets": log.rows("SELECT count(*) FROM events WHERE type LIKE '%.forgotten'")[0][0],
        "erased_messages": log.rows("SELECT count(*) FROM erased_messages")[0][0],
        "erasures": log.rows("SELECT count(*) FROM erasures WHERE kind <> 'retention'")[0][0],
    }


def retention(before: str) -> Event:
    return event(EventType.RETENTION_APPLIED, {"forgotten_before": before},
                 created_at=at(50))


def test_old_forgets_lose_their_records_young_ones_keep_them(log: EventLog) -> None:
    log.send(append("a", "old secret", 0, user_id="u1"), append("b", "young secret", 1),
             append("c", "bystander", 2, user_id="u2"))
    log.send(event(EventType.SESSION_FORGOTTEN, {}, session="a", created_at=at(10)))
    log.send(event(EventType.SESSION_FORGOTTEN, {}, session="b", created_at=at(30)))
    log.send(append("b", "a turn after the forget", 31))
    assert forgotten_records(log) == {"tombstones": 2, "forgets": 2, "erased_messages": 2,
                                      "erasures": 2}
    result = log.send(retention(at(20)))  # only the forget of "a" is older
    assert [e.event_id for e in result.effects.erased] != []
    assert forgotten_records(log) == {"tombstones": 1, "forgets": 1, "erased_messages": 1,
                                      "erasures": 1}
    sessions = {r[0] for r in log.rows("SELECT session_id FROM sessions")}
    assert sessions == {"b", "c"}  # a's lone mark went; b has a turn since its forget
    assert log.rows("SELECT type FROM events WHERE session_id = 'a'") == []
    log.assert_rebuild_equal()
    log.send(retention(at(59)))
    assert forgotten_records(log) == dict.fromkeys(("tombstones", "forgets",
                                                    "erased_messages", "erasures"), 0)
    assert [r[0] for r in log.rows("SELECT content FROM messages ORDER BY seq")] == [
        "bystander", "a turn after the forget"]
    log.assert_rebuild_equal()


def test_a_user_forget_goes_with_its_fact_tombstones(log: EventLog) -> None:
    log.send(append("a", "hello", 0, user_id="u1"),
             event(EventType.FACT_SET, {"category": "c", "key": "k", "value": "v",
                                        "source": "agent", "user_id": "u1"}))
    log.send(event(EventType.USER_FORGOTTEN, {"user_id": "u1"}, created_at=at(10)))
    log.send(retention(at(20)))
    assert forgotten_records(log)["tombstones"] == 0
    assert log.rows("SELECT count(*) FROM events")[0][0] == 1  # the retention event alone
    log.assert_rebuild_equal()


def test_nothing_old_enough_changes_nothing(log: EventLog) -> None:
    log.send(append("a", "hello", 0))
    log.send(event(EventType.SESSION_FORGOTTEN, {}, session="a", created_at=at(10)))
    before = forgotten_records(log)
    result = log.send(retention(at(5)))
    assert result.effects.erased == []
    assert forgotten_records(log) == before


def summary(session: str, sources: list[Event], text: str, minute: int) -> Event:
    return event(EventType.SESSION_CONSOLIDATED, {
        "summary_id": uuid7(), "content": text, "importance": 0.7,
        "source_ids": [e.payload["message_id"] for e in sources]},
        session=session, created_at=at(minute))


def embedded(message: Event) -> Event:
    return event(EventType.MESSAGE_EMBEDDED, {
        "message_id": message.payload["message_id"], "model": "m", "dim": 1,
        "vector_b64": "AACAPw=="})


def expire(before: str, *sessions: str) -> Event:
    return event(EventType.RETENTION_APPLIED, {"messages_before": before,
                                               "sessions": list(sessions)}, created_at=at(58))


def test_old_messages_go_their_summaries_stay(log: EventLog) -> None:
    turns = [append("a", f"secret turn {i} " * 20, i, user_id="u1", agent_id="x")
             for i in range(6)]
    other = append("b", "secret of another session", 0, user_id="u2")
    log.send(*turns, other, *[embedded(t) for t in turns])
    log.send(summary("a", turns[:4], "the first four turns, short", 30))
    result = log.send(expire(at(4), "a"))
    contents = {r[0] for r in log.rows("SELECT content FROM messages")}
    assert contents == {"the first four turns, short", "secret of another session",
                        turns[4].payload["content"], turns[5].payload["content"]}
    assert len(result.effects.erased[0].message_ids) == 4
    [(count, started, owner)] = log.rows(
        "SELECT message_count, started_at, user_id FROM sessions WHERE session_id = 'a'")
    assert (count, started, owner) == (2, at(0), "u1")  # the summary starts where they did
    payloads = [r[0] for r in log.rows("SELECT payload FROM events WHERE erased_by IS NOT NULL")]
    assert payloads == ["{}"] * 8  # four appends, four embeddings
    assert log.rows("SELECT count(*) FROM events WHERE payload LIKE '%secret turn 0%'") == [(0,)]
    assert log.rows("SELECT count(*) FROM erased_messages WHERE created_at IS NOT NULL") == [
        (4,)]
    log.assert_rebuild_equal()


def test_a_session_left_empty_keeps_only_its_mark(log: EventLog) -> None:
    log.send(append("a", "one", 0, user_id="u1"), append("a", "two", 1))
    result = log.send(expire(at(10), "a"))
    [(changed, count, owner, last)] = log.rows(
        "SELECT changed_seq, message_count, user_id, last_active_at FROM sessions")
    assert (count, owner, last) == (0, None, None)
    assert changed == result.effects.erased[0].seq
    log.assert_rebuild_equal()


def test_a_summary_arriving_after_retention_is_tombstoned(log: EventLog) -> None:
    turns = [append("a", f"turn {i} " * 20, i, user_id="u1") for i in range(3)]
    log.send(*turns)
    log.send(expire(at(10), "a"))
    late = summary("a", turns, "late summary of expired turns", 30)
    log.send(late)
    assert log.rows("SELECT payload FROM events WHERE event_id = ?", late.id) == [("{}",)]
    assert log.rows("SELECT count(*) FROM messages") == [(0,)]
    log.assert_rebuild_equal()


def test_then_forgotten_records_go_but_retentions_stay(log: EventLog) -> None:
    turns = [append("a", f"turn {i} " * 20, i, user_id="u1") for i in range(3)]
    log.send(*turns, append("b", "bye", 0, user_id="u2"))
    log.send(summary("a", turns[:2], "summary of two", 20))
    log.send(expire(at(5), "a"))
    log.send(event(EventType.SESSION_FORGOTTEN, {}, session="b", created_at=at(30)))
    log.send(retention(at(59)))
    assert log.rows("SELECT kind FROM erasures ORDER BY seq") == [("retention",)] * 2
    assert log.rows("SELECT count(*) FROM erased_messages") == [(3,)]  # a's, not b's
    log.assert_rebuild_equal()


@pytest.mark.parametrize("payload", [
    {}, {"messages_before": at(1)}, {"sessions": ["a"]},
    {"forgotten_before": at(1), "sessions": ["a"]}, {"calls_before": at(1), "sessions": ["a"]},
    {"calls_before": "yesterday"}, {"calls_before": at(1), "tool_call_sessions": ["a"]},
    {"documents_at": "now"}, {"documents_at": at(1), "sessions": ["a"]}])
def test_an_incomplete_event_is_set_aside(log: EventLog, payload: dict[str, Any]) -> None:
    log.send(event(EventType.RETENTION_APPLIED, payload))
    assert any("retention.applied" in reason for reason in log.rejections())


def test_messages_must_outlive_consolidation() -> None:
    with pytest.raises(ConfigError, match="before consolidation may summarise them"):
        Config(retention=RetentionConfig(messages_days=0.5))
    Config(retention=RetentionConfig(messages_days=2))  # 48 h > min_age_hours 24


@pytest.mark.parametrize("values", [
    {"forgotten_days": -1.0}, {"forgotten_days": float("nan")}, {"interval_hours": 0.0},
    {"messages_days": -2.0}, {"messages_days": float("inf")},
    {"interval_hours": 10_000.0}, {"tool_calls_days": -1.0}, {"tool_calls_days": float("nan")}])
def test_bad_settings_are_refused(values: dict[str, float]) -> None:
    with pytest.raises(ConfigError, match=r"\[retention\] value\(s\) out of range"):
        RetentionConfig(**values)


@pytest.mark.redis
def test_the_writer_applies_retention_on_its_own(config: Config) -> None:
    """A real writer with `[retention] forgotten_days` of about a second: the records of a
    forget go by themselves, through an event in the log; the rest stays."""
    config = config.replace(
        writer=WriterConfig(reconcile_interval_s=0.1),
        retention=RetentionConfig(forgotten_days=1 / 86_400, interval_hours=0.1 / 3600))
    with WriterThread(config), MemoryClient(config=config) as client:
        client.append("old", "user", "forget me", user_id="u1")
        client.append("other", "user", "keep me", user_id="u2")
        client.flush()
        client.wait_forgotten(client.forget_session("old"))
        deadline = time.monotonic() + 30
        while _count(config, "SELECT count(*) FROM erasures WHERE kind = 'session'"):
            assert time.monotonic() < deadline, "retention never ran"
            time.sleep(0.1)
        [(event_id,)] = _rows(config, "SELECT event_id FROM events "
                                      "WHERE type = 'retention.applied'")
        _wait_finished(config, event_id, deadline)
        assert [m.content for m in client.history("other")] == ["keep me"]
        assert _count(config, "SELECT count(*) FROM events WHERE erased_by IS NOT NULL") == 0
        assert _count(config, "SELECT count(*) FROM events WHERE type = "
                              "'session.forgotten'") == 0
    assert main(["rebuild", "--check", "--db", config.db_path]) == 0


@pytest.mark.redis
def test_the_writer_erases_old_messages_everywhere(config: Config) -> None:
    """`[retention] messages_days` of about a second: old turns (and the queued embedding
    jobs that carry them) are erased from the database file, its WAL and Redis."""
    from datetime import UTC, datetime, timedelta

    from memq.config import ConsolidationConfig
    from tests.producers.test_forget import redis_bytes

    marker = "qzvretention5521"
    config = config.replace(
        writer=WriterConfig(reconcile_interval_s=0.1),
        consolidation=ConsolidationConfig(min_age_hours=0),
        retention=RetentionConfig(messages_days=1 / 86_400, interval_hours=0.1 / 3600))
    old = datetime.now(UTC) - timedelta(days=3)
    with WriterThread(config), MemoryClient(config=config) as client:
        for i in range(3):
            client.append("old", "user", f"my code is {marker} ({i})", user_id="u1",
                          created_at=old + timedelta(minutes=i))
        client.flush()
        connection = redis.Redis.from_url(config.redis_url)
        deadline = time.monotonic() + 30
        event_id = _retention_recorded(config, deadline, "retention never ran")
        _wait_finished(config, event_id, deadline)
        assert client.history("old") == []
        assert client.sessions(user_id="u1") == []
        keys = sorted({name for name, value in redis_bytes(connection)
                       if marker.encode() in value})
    files = _files_holding(config, marker)
    assert (files, keys) == ([], [])
    assert main(["rebuild", "--check", "--db", config.db_path]) == 0


@pytest.mark.redis
def test_without_a_setting_the_records_stay(config: Config) -> None:
    config = config.replace(writer=WriterConfig(reconcile_interval_s=0.1))
    with WriterThread(config), MemoryClient(config=config) as client:
        client.append("old", "user", "forget me", user_id="u1")
        client.wait_forgotten(client.forget_session("old"))
        time.sleep(0.5)  # several reconcile passes
    assert _count(config, "SELECT count(*) FROM erasures") == 1
    assert _count(config, "SELECT count(*) FROM events WHERE type = 'retention.applied'") == 0


def _retention_recorded(config: Config, deadline: float, never: str) -> str:
    """Until the pass is recorded in ``erasures``, the only record there: its event id."""
    while not _rows(config, "SELECT event_id FROM erasures WHERE kind = 'retention'"):
        assert time.monotonic() < deadline, never
        time.sleep(0.1)
    [(event_id,)] = _rows(config, "SELECT event_id FROM erasures")
    return str(event_id)


def _wait_finished(config: Config, event_id: str, deadline: float) -> None:
    """Until the pass's follow-up is done: the WAL truncated, the outcome published."""
    connection = redis.Redis.from_url(config.redis_url)
    while not connection.exists(f"memq:erased:{event_id}"):
        assert time.monotonic() < deadline, "the retention pass never finished"
        time.sleep(0.05)


def _files_holding(config: Config, marker: str) -> list[str]:
    """The database file and its WAL, those whose bytes hold ``marker``."""
    return [p for p in (config.db_path, f"{config.db_path}-wal")
            if Path(p).exists() and marker.encode() in Path(p).read_bytes()]


def _rows(config: Config, sql: str) -> list[tuple[Any, ...]]:
    import apsw

    conn = apsw.Connection(config.db_path, flags=apsw.SQLITE_OPEN_READONLY)
    try:
        return [tuple(r) for r in conn.execute(sql)]
    finally:
        conn.close()


def _count(config: Config, sql: str) -> int:
    return int(_rows(config, sql)[0][0])


def test_young_turns_keep_the_owner_an_erased_one_gave_their_session(log: EventLog) -> None:
    """A turn that named no owner inherited the session's: a rebuild, which no longer sees
    the erased turn that fixed it, must give it the same (and accept a later turn naming
    it), from what ``erased_messages`` kept."""
    log.send(append("a", "old", 0, user_id="u1", agent_id="x"), append("a", "young", 20),
             append("a", "young again", 21, user_id="u1"))
    log.send(expire(at(10), "a"))
    assert log.rows("SELECT DISTINCT user_id, agent_id FROM messages") == [("u1", "x")]
    log.assert_rebuild_equal()


# -- recorded tool calls ----------------------------------------------------------------------


def call(session: str, tool: str, path: str, minute: int) -> Event:
    return event(EventType.MACRO_OBSERVED, {"tool": tool, "args": {"path": path}},
                 session=session, created_at=at(minute))


def expire_calls(before: str) -> Event:
    return event(EventType.RETENTION_APPLIED, {"calls_before": before}, created_at=at(50))


def learned(log: EventLog) -> list[tuple[Any, ...]]:
    return log.rows("SELECT trigger_tool, next_tool FROM macros ORDER BY 1, 2")


def test_old_tool_calls_go_and_the_macros_are_learned_again(log: EventLog) -> None:
    log.send(*(call("s", tool, "/home/me/qzvcall7731.py", minute)
               for minute, tool in enumerate(["read_file", "edit_file"] * 2)),
             call("t", "read_file", "kept.py", 35),
             call("s", "run_tests", "tests/", 40), call("s", "git_commit", "tests/", 41))
    assert ("read_file", "edit_file") in learned(log)
    log.send(expire_calls(at(30)))
    assert set(learned(log)) == {("run_tests", "git_commit")}
    assert log.rows("SELECT count(*) FROM events WHERE type = 'macro.observed' "
                    "AND erased_by IS NOT NULL") == [(4,)]
    assert log.rows("SELECT count(*) FROM events WHERE payload LIKE '%qzvcall7731%'") == [(0,)]
    assert log.rows("SELECT count(*) FROM macro_last_calls WHERE args_json LIKE '%qzvcall%'"
                    ) == [(0,)]
    assert log.rows("SELECT kind, messages, events FROM erasures") == [("retention", 0, 4)]
    log.assert_rebuild_equal()


def test_a_call_logged_after_the_pass_stays_whatever_its_time(log: EventLog) -> None:
    # On a rebuild the log holds the later calls already when the pass is replayed.
    log.send(call("s", "read_file", "a.py", 0))
    log.send(expire_calls(at(30)))
    log.send(call("s", "read_file", "late.py", 1), call("s", "edit_file", "late.py", 2))
    assert log.rows("SELECT payload FROM events WHERE type = 'macro.observed' "
                    "AND erased_by IS NULL AND payload LIKE '%late.py%'") != []
    assert set(learned(log)) == {("read_file", "edit_file")}
    log.assert_rebuild_equal()


def test_calls_without_messages_give_their_session_no_row(log: EventLog) -> None:
    log.send(append("talk", "hello", 0), call("talk", "read_file", "a.py", 1),
             call("tools-only", "read_file", "b.py", 2))
    before = log.rows("SELECT session_id, changed_seq FROM sessions ORDER BY 1")
    log.send(expire_calls(at(30)))
    assert log.rows("SELECT session_id, changed_seq FROM sessions ORDER BY 1") == before
    assert log.rows("SELECT count(*) FROM events WHERE type = 'macro.observed' "
                    "AND erased_by IS NULL") == [(0,)]
    log.assert_rebuild_equal()


def test_a_use_of_a_macro_only_old_calls_taught_goes_too(log: EventLog) -> None:
    log.send(call("s", "read_file", "a.py", 0), call("s", "edit_file", "a.py", 1))
    [(macro_id,)] = log.rows("SELECT min(id) FROM macros")
    log.send(event(EventType.MACRO_USED, {"macro_id": macro_id}, created_at=at(40)))
    log.send(expire_calls(at(30)))
    assert learned(log) == []
    assert log.rows("SELECT count(*) FROM events WHERE type = 'macro.used' "
                    "AND erased_by IS NOT NULL") == [(1,)]
    log.assert_rebuild_equal()


@pytest.mark.redis
def test_the_writer_erases_old_tool_calls_from_the_file(config: Config) -> None:
    """`[retention] tool_calls_days` of about a second: the arguments of recorded tool
    calls leave the database file and its WAL, and what they taught is unlearned."""
    marker = "qzvtoolcall0342"
    config = config.replace(
        writer=WriterConfig(reconcile_interval_s=0.1),
        retention=RetentionConfig(tool_calls_days=1 / 86_400, interval_hours=0.1 / 3600))
    with WriterThread(config), MemoryClient(config=config) as client:
        for _ in range(3):
            client.record_tool_call("s1", "read_file", {"path": f"/home/{marker}/a.py"})
            client.record_tool_call("s1", "edit_file", {"path": f"/home/{marker}/a.py"})
        client.flush()
        assert [s.tool for s in client.suggest_next_tools("read_file", {"path": "b.py"})]
        deadline = time.monotonic() + 30
        while _count(config, "SELECT count(*) FROM events WHERE type = 'macro.observed' "
                             "AND erased_by IS NULL"):
            assert time.monotonic() < deadline, "retention never erased the calls"
            time.sleep(0.1)
        # One pass, or more when recording the calls took longer than their retention.
        erasures = _rows(config, "SELECT event_id FROM erasures WHERE kind = 'retention'")
        assert erasures
        for (event_id,) in erasures:
            _wait_finished(config, event_id, deadline)
        assert client.suggest_next_tools("read_file", {"path": "b.py"}) == []
    files = _files_holding(config, marker)
    assert files == []
    assert main(["rebuild", "--check", "--db", config.db_path]) == 0


# -- expired documents ------------------------------------------------------------------------

def test_expired_documents_go_with_their_values(log: EventLog) -> None:
    def put(key: str, ttl: float | None) -> Event:
        payload = {"namespace": ["notes"], "key": key, "value": {"v": f"{key}-4d2b"}}
        return event(EventType.DOCUMENT_PUT, payload | ({} if ttl is None else
                                                         {"ttl_minutes": ttl}))
    log.send(put("short", 5), put("long", 60), put("kept", None))
    log.send(event(EventType.RETENTION_APPLIED, {"documents_at": at(10)}, created_at=at(11)))
    assert log.rows("SELECT key FROM documents ORDER BY key") == [("kept",), ("long",)]
    values = "".join(r[0] for r in log.rows("SELECT payload FROM events"))
    assert "short-4d2b" not in values
    assert "long-4d2b" in values
    assert log.rows("SELECT kind, messages, events FROM erasures") == [("retention", 0, 1)]
    log.assert_rebuild_equal()


@pytest.mark.redis
def test_the_writer_expires_documents_whatever_the_settings(config: Config) -> None:
    """With no `[retention]` setting on, a document whose time to live ran out leaves the
    database file and its WAL by the writer's own pass, no other document event needed."""
    marker = "qzvdocument8163"
    config = config.replace(writer=WriterConfig(reconcile_interval_s=0.1),
                            retention=RetentionConfig(interval_hours=0.1 / 3600))
    with WriterThread(config), MemoryClient(config=config) as client:
        client.put_document(["notes"], "brief", {"text": marker}, ttl_minutes=0.5 / 60)
        client.put_document(["notes"], "kept", {"text": "stays"})
        client.flush()
        deadline = time.monotonic() + 30
        event_id = _retention_recorded(config, deadline, "the expired document never went")
        _wait_finished(config, event_id, deadline)
        assert client.document(["notes"], "brief") is None
        assert client.document(["notes"], "kept") is not None
    files = _files_holding(config, marker)
    assert files == []
    assert main(["rebuild", "--check", "--db", config.db_path]) == 0
