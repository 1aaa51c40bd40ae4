"""The writer reads the three inbox streams and judges each entry with its stream's rights."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import apsw
import orjson
import pytest
import redis
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from memq import MemoryClient, names
from memq.authority import ROLE_OF_STREAM, Role, refusal
from memq.clock import now_rfc3339, uuid7
from memq.config import Config
from memq.events import Event, EventType, encode
from memq.store.write import batch
from memq.testing import WriterThread, wait_committed
from tests.memq.test_authority import base_payload
from tests.store.eventlog import EventLog

pytestmark = pytest.mark.redis

AGENT, WORKER, ADMIN = names.INBOX_STREAM, names.WORKER_INBOX_STREAM, names.ADMIN_INBOX_STREAM
T = EventType


def event(etype: str, payload: dict[str, Any], session: str | None = None) -> Event:
    return Event(id=uuid7(), type=etype, session_id=session, created_at=now_rfc3339(),
                 payload=payload)


def message(content: str = "hi", session: str = "s1") -> Event:
    return event(T.MESSAGE_APPENDED, {"message_id": uuid7(), "role": "user",
                                      "content": content, "importance": 0.5}, session)


def push(config: Config, *entries: tuple[str, Event | bytes]) -> list[bytes]:
    """XADD each entry to its stream, a few milliseconds apart.

    Stream ids are per stream: entries of different streams sent within the same
    millisecond have no order between them (nor do the sends of different principals).
    """
    broker = redis.Redis.from_url(config.redis_url)
    ids = []
    for stream, item in entries:
        raw = item if isinstance(item, bytes) else encode(item)
        ids.append(broker.xadd(stream, {names.EVENT_FIELD: raw}))
        time.sleep(0.003)
    return ids


def rows(config: Config, sql: str) -> list[tuple[Any, ...]]:
    conn = apsw.Connection(config.db_path, flags=apsw.SQLITE_OPEN_READONLY)
    try:
        return [tuple(row) for row in conn.execute(sql)]
    finally:
        conn.close()


def test_each_stream_carries_what_its_role_may_send(writer: WriterThread, config: Config) -> None:
    turn = message("from an agent")
    vector = event(T.MESSAGE_EMBEDDED, {"message_id": turn.payload["message_id"],
                                        "model": "m", "dim": 1, "vector_b64": "AACAPw=="})
    push(config,
         (AGENT, turn),
         (AGENT, event(T.PREFIX_ALLOWED, {"prefix": "rm"})),
         (AGENT, event(T.MESSAGE_EMBEDDED, {**vector.payload, "model": "forged"})),
         (WORKER, vector),
         (WORKER, message("a worker does not talk")),
         (WORKER, event(T.FACT_SET, {"category": "user", "key": "k", "value": "v",
                                     "source": "user"})),
         (ADMIN, event(T.PREFIX_ALLOWED, {"prefix": "git status"})))
    wait_committed(redis.Redis.from_url(config.redis_url))
    assert rows(config, "SELECT content, embedding_model FROM messages") == [
        ("from an agent", "m")]
    assert rows(config, "SELECT prefix FROM terminal_allowed_prefixes") == [("git status",)]
    assert rows(config, "SELECT stream, reason FROM rejected_events ORDER BY id") == [
        (AGENT, "prefix.allowed may only come from admin, not from an agent (memq:inbox)"),
        (AGENT, "message.embedded may only come from worker or admin, "
                "not from an agent (memq:inbox)"),
        (WORKER, "message.appended may only come from agent or admin, "
                 "not from a worker (memq:inbox:worker)"),
        (WORKER, "fact.set with source=user may only come from admin, "
                 "not from a worker (memq:inbox:worker)"),
    ]


def test_each_stream_has_its_commit_position(writer: WriterThread, config: Config) -> None:
    ids = push(config, (AGENT, message()), (WORKER, b"not json"), (ADMIN, message()))
    broker = redis.Redis.from_url(config.redis_url)
    wait_committed(broker)
    committed = [broker.get(names.COMMITTED_KEYS[s]) for s in (AGENT, WORKER, ADMIN)]
    assert committed == ids
    assert sum(broker.xlen(s) for s in names.INBOX_STREAMS) == 0


def test_streams_interleave_in_the_order_sent(writer: WriterThread, config: Config) -> None:
    """The person sets a fact, then an agent tries to overwrite it: the agent's change comes
    second, so it is logged and not applied; the other way round, it is applied first."""
    user = {"category": "user", "key": "city", "source": "user"}
    agent = {"category": "user", "key": "city", "source": "agent"}
    push(config,
         (ADMIN, event(T.FACT_SET, {**user, "value": "Lisbon"})),
         (AGENT, event(T.FACT_SET, {**agent, "value": "Paris"})),
         (AGENT, event(T.FACT_SET, {**agent, "key": "food", "value": "soup"})),
         (ADMIN, event(T.FACT_SET, {**user, "key": "food", "value": "bread"})))
    wait_committed(redis.Redis.from_url(config.redis_url))
    with MemoryClient(config=config) as client:
        city = [(c.value, c.applied) for c in client.fact_history("user", "city")]
        food = [(c.value, c.applied) for c in client.fact_history("user", "food")]
    assert city == [("Lisbon", True), ("Paris", False)]
    assert food == [("soup", True), ("bread", True)]


def test_clients_of_each_role_flush_on_their_own_stream(
    writer: WriterThread, config: Config, role_urls: dict[Role, str]
) -> None:
    for role, url in role_urls.items():
        with MemoryClient(config=config.replace(redis_url=url)) as client:
            assert client.role is role
            client.set_fact("notes", role.value, "written", source="agent")
            client.flush(10)
            assert client.outbox.stream == names.INBOX_STREAMS[list(Role).index(role)]
    assert rows(config, "SELECT key FROM facts ORDER BY key") == [
        ("admin",), ("agent",), ("worker",)]


# -- tasks: judged against the task as it stands ----------------------------------------------


def task(task_id: str, **fields: Any) -> dict[str, Any]:
    return {**base_payload(T.TASK_SCHEDULED), "task_id": task_id, **fields}


def apply(log: EventLog, *entries: tuple[str, Event]) -> batch.BatchResult:
    items = [batch.Entry(stream, f"{i + 1}-0".encode(), {names.EVENT_FIELD: encode(e)})
             for i, (stream, e) in enumerate(entries)]
    decoded = batch.decode_entries(items, log.writer.config.limits)
    return log.writer.apply_batch(decoded, items[-1].id.decode())


def test_a_protected_task_is_changed_by_admin_only(tmp_path: Path) -> None:
    log = EventLog(tmp_path)
    # In one batch: admin schedules a trusted task, an agent schedules its own; the agent then
    # tries to pause, untrust-by-editing and delete the trusted one and pauses its own.
    result = apply(
        log,
        (ADMIN, event(T.TASK_SCHEDULED, task("trusted1", trusted=True))),
        (AGENT, event(T.TASK_SCHEDULED, task("mine"))),
        (AGENT, event(T.TASK_CHANGED, {"task_id": "trusted1", "paused": True})),
        (AGENT, event(T.TASK_CHANGED, {"task_id": "trusted1", "prompt": "rm -rf ~"})),
        (WORKER, event(T.TASK_DELETED, {"task_id": "trusted1"})),
        (AGENT, event(T.TASK_CHANGED, {"task_id": "mine", "paused": True})),
        (ADMIN, event(T.TASK_CHANGED, {"task_id": "trusted1", "prompt": "new"})),
    )
    assert (result.applied, result.rejected) == (4, 3)
    assert log.rows("SELECT id, prompt, is_paused, is_trusted FROM scheduled_tasks ORDER BY id"
                    ) == [("mine", "p", 1, 0), ("trusted1", "new", 0, 1)]
    assert log.rejections() == [
        "task.changed of a trusted task may only come from admin, not from an agent "
        "(memq:inbox)"] * 2 + [
        "task.deleted may only come from agent or admin, not from a worker (memq:inbox:worker)"]
    log.close()


def test_a_config_task_is_changed_by_admin_only(tmp_path: Path) -> None:
    log = EventLog(tmp_path)
    apply(log, (ADMIN, event(T.TASK_SCHEDULED, task("cfg", source="config"))))
    result = apply(log, (AGENT, event(T.TASK_DELETED, {"task_id": "cfg"})),
                   (AGENT, event(T.TASK_DELETED, {"task_id": "gone"})))
    assert (result.applied, result.rejected) == (1, 1)  # deleting what is gone is a no-op
    assert log.rows("SELECT id FROM scheduled_tasks") == [("cfg",)]
    assert "of a task from the configuration" in log.rejections()[0]
    log.close()


# -- replays go back to where they came from ---------------------------------------------------


def test_a_replay_is_judged_with_its_senders_rights(
    writer: WriterThread, config: Config
) -> None:
    from memq.cli import main

    forged = event(T.PREFIX_ALLOWED, {"prefix": "rm"})
    push(config, (AGENT, forged))
    broker = redis.Redis.from_url(config.redis_url)
    wait_committed(broker)
    assert main(["rejected", "replay", "--all", "--db", config.db_path,
                 "--redis-url", config.redis_url]) == 0
    wait_committed(broker)
    assert rows(config, "SELECT prefix FROM terminal_allowed_prefixes") == []
    assert rows(config, "SELECT stream, attempts, replayed_at FROM rejected_events") == [
        (AGENT, 2, None)]


def test_a_replay_mark_from_another_stream_is_not_taken(
    writer: WriterThread, config: Config
) -> None:
    push(config, (ADMIN, b"not json"))
    broker = redis.Redis.from_url(config.redis_url)
    wait_committed(broker)
    # An agent claims to replay the admin's rejected entry, with an entry of its own.
    broker.xadd(AGENT, {names.EVENT_FIELD: encode(message()), names.REPLAY_FIELD: b"1"})
    broker.xadd(AGENT, {names.EVENT_FIELD: b"also bad", names.REPLAY_FIELD: b"1"})
    wait_committed(broker)
    assert rows(config, "SELECT id, stream, attempts, replayed_at FROM rejected_events") == [
        (1, ADMIN, 1, None), (2, AGENT, 1, None)]


# -- generated: the writer and the table agree -------------------------------------------------

ROLE_STREAMS = [s for s in names.INBOX_STREAMS if s != names.KEYS_INBOX_STREAM]
"""The roles' streams (the keys' one also needs a key: tests/server/test_grants.py)."""


@settings(max_examples=15, derandomize=True, database=None, deadline=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])
@given(st.lists(st.tuples(st.sampled_from(ROLE_STREAMS), st.sampled_from(sorted(
    t for t in EventType if not t.endswith(".imported"))), st.booleans()),
    min_size=1, max_size=20))
# Once failed in CI: the worker's refused forget and the agent's forget, sent within one
# millisecond on two streams, were applied in the other order.
@example([(AGENT, T.MESSAGE_EMBEDDED, False), (ADMIN, T.MESSAGE_EMBEDDING_FAILED, True),
          (ADMIN, T.PREFIX_REVOKED, False), (WORKER, T.SESSION_FORGOTTEN, True),
          (AGENT, T.SESSION_FORGOTTEN, False), (AGENT, T.DOCUMENT_DELETED, True)])
def test_the_writer_rejects_exactly_what_the_table_refuses(
    writer: WriterThread, config: Config, sends: list[tuple[str, str, bool]]
) -> None:
    broker = redis.Redis.from_url(config.redis_url)
    expected: list[tuple[Event, str | None]] = []
    sent_ids: set[str] = set()
    for stream, etype, privileged in sends:
        payload = {**base_payload(etype), **(_privileged(etype) if privileged else {})}
        if etype == T.MESSAGE_FORGOTTEN:
            # Forgetting m1, which is there, would erase the rejected entries naming it
            # (as a session forget does below); a message never appended erases nothing.
            payload["message_id"] = "never-appended"
        sent = event(etype, payload, session="s1")
        sent_ids.add(sent.id)
        erases = etype in (T.SESSION_FORGOTTEN, T.USER_FORGOTTEN)
        if erases:
            # Entries of different streams have no order between them, so a forget read in
            # one batch with another stream's entries may come before or after them: a
            # forget is committed on its own, after everything sent before it.
            wait_committed(broker)
        broker.xadd(stream, {names.EVENT_FIELD: encode(sent)})
        if erases:
            wait_committed(broker)
        reason = refusal(ROLE_OF_STREAM[stream], sent)
        if reason is None and erases:
            # A forget erases the rejected entries that name what it forgets: all of them
            # name session s1, and a rejected user.forgotten names the user.
            expected = [(e, r) for e, r in expected if etype == T.USER_FORGOTTEN
                        and "user_id" not in e.payload]
        expected.append((sent, reason))
    wait_committed(broker)
    # This example's entries, by their event ids: a forget here may have deleted entries
    # of earlier examples, so counting rows from where they stood would miss some.
    authority_reasons = [
        reason for raw, reason in rows(config, "SELECT raw, reason FROM rejected_events")
        if "may only come from" in reason and orjson.loads(raw)["id"] in sent_ids]
    # Sorted: sends of different streams within one millisecond have no order between them.
    assert sorted(authority_reasons) == sorted(r for _, r in expected if r is not None)


def _privileged(etype: str) -> dict[str, Any]:
    return {T.FACT_SET: {"source": "user"}, T.FACT_DELETED: {"force": True},
            T.TASK_SCHEDULED: {"trusted": True, "task_id": uuid7()},
            # Another task than t1: t1 made trusted would turn the agent's later changes of
            # it into refusals the payload alone does not foresee (the task decides them).
            T.TASK_CHANGED: {"trusted": True, "task_id": "t-made-trusted"}}.get(etype, {})


def test_entries_read_in_order_across_streams(config: Config) -> None:
    from memq.store.write.inbox import Inbox

    inbox = Inbox(redis.Redis.from_url(config.redis_url), config)
    inbox.ensure_group()
    ids = push(config, (ADMIN, message("1")), (AGENT, message("2")), (WORKER, message("3")),
               (AGENT, message("4")), (ADMIN, message("5")))
    entries = inbox.read_new()
    assert [e.id for e in entries] == ids
    assert [orjson.loads(e.fields[names.EVENT_FIELD])["payload"]["content"]  # type: ignore[index]
            for e in entries] == ["1", "2", "3", "4", "5"]
    assert [e.stream for e in inbox.read_pending()] == [ADMIN, AGENT, WORKER, AGENT, ADMIN]
