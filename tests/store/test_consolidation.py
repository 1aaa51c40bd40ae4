"""Consolidation in the writer: planning passes into jobs, applying summaries, reading them."""

from __future__ import annotations

import zlib
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import apsw
import orjson
import pytest

from memq import MemoryClient, names
from memq.clock import to_rfc3339, uuid7
from memq.config import Config, ConsolidationConfig
from memq.errors import ConfigError, EventsRejected, ValidationError
from memq.events import Event, EventType
from memq.jobs import queue
from memq.store import rebuild, schema
from memq.store.connection import open_connection
from memq.store.dispatch.consolidation_jobs import JOB_FUNCTION, Chunk, chunk_rows, wait_planned
from memq.store.effects import Effects
from memq.store.projections import apply_event
from memq.store.projections.consolidation import proposed_facts
from memq.store.read.summaries import sources_of, summary_of, timeline
from memq.workers.consolidate import request_event

pytestmark = pytest.mark.redis

NOW = datetime.now(UTC)
OLD = NOW - timedelta(days=2)


@pytest.fixture
def config(config: Config) -> Config:
    return config.replace(
        consolidation=ConsolidationConfig(chunk_size=4, min_chunk_chars=0, job_timeout_s=77)
    )


def db(config: Config) -> apsw.Connection:
    return apsw.Connection(config.db_path, flags=apsw.SQLITE_OPEN_READONLY)


def rows(config: Config, sql: str, *args: Any) -> list[tuple[Any, ...]]:
    return db(config).execute(sql, args).fetchall()


def append_old(client: MemoryClient, session: str, count: int, start: datetime = OLD,
               text: str = "turn") -> list[str]:
    return [
        client.append(session, "user" if i % 2 == 0 else "assistant",
                      f"{text} {i} of {session}: a sentence long enough to summarise.",
                      created_at=start + timedelta(minutes=i))
        for i in range(count)
    ]


def send(client: MemoryClient, event: Event) -> None:
    client.outbox.send(event)
    client.flush()
    if event.type == EventType.CONSOLIDATION_REQUESTED:
        wait_planned(client.redis, event.id, 10)  # jobs are enqueued after the commit


def consolidate_jobs(client: MemoryClient) -> list[Any]:
    return list(queue(names.QUEUE_CONSOLIDATE, client.redis).jobs)


def summary(session: str, source_ids: list[str], content: str = "short", **extra: Any) -> Event:
    payload = {"summary_id": uuid7(), "content": content, "source_ids": source_ids,
               "importance": 0.7, "facts": [], **extra}
    return Event(id=uuid7(), type=EventType.SESSION_CONSOLIDATED, session_id=session,
                 created_at=to_rfc3339(NOW), payload=payload)


# -- planning a pass ------------------------------------------------------------------


def test_pass_enqueues_old_messages_per_session_in_bounded_chunks(
    client: MemoryClient, config: Config
) -> None:
    a = append_old(client, "a", 10)
    append_old(client, "a", 2, start=NOW - timedelta(minutes=5), text="recent")
    b = append_old(client, "b", 3)
    send(client, request_event())
    jobs = consolidate_jobs(client)
    chunks = [[m["id"] for m in job.kwargs["messages"]] for job in jobs]
    assert sorted(chunks) == sorted([a[0:4], a[4:8], a[8:10], b])
    for job in jobs:
        assert job.func_name == JOB_FUNCTION
        assert job.timeout == 77
        expected = Chunk(job.kwargs["session_id"], tuple(job.kwargs["messages"]))
        assert job.id == expected.job_id  # deterministic: derived from the message ids
        assert set(job.kwargs["messages"][0]) == {"id", "role", "content", "created_at"}
        raw = client.redis.hget(f"rq:job:{job.id}", "data")
        assert orjson.loads(zlib.decompress(raw))  # JSON (compressed by rq), never pickle


def test_a_second_pass_does_not_enqueue_chunks_already_queued(client: MemoryClient) -> None:
    append_old(client, "a", 6)
    send(client, request_event())
    first = sorted(job.id for job in consolidate_jobs(client))
    send(client, request_event())
    assert sorted(job.id for job in consolidate_jobs(client)) == first


def test_a_request_can_name_a_session_and_an_age(client: MemoryClient) -> None:
    append_old(client, "a", 2, start=NOW - timedelta(minutes=30))
    recent_b = append_old(client, "b", 2, start=NOW - timedelta(minutes=30))
    send(client, request_event())
    assert consolidate_jobs(client) == []  # nothing is 24 h old
    send(client, request_event(min_age_hours=0.1, session_id="b"))
    [job] = consolidate_jobs(client)
    assert [m["id"] for m in job.kwargs["messages"]] == recent_b


def test_bad_requests_are_refused_before_sending() -> None:
    with pytest.raises(ValidationError, match=r"between 0\.0 and"):
        request_event(min_age_hours=-1)
    with pytest.raises(ValidationError, match="control character"):
        request_event(session_id="a\nb")


def test_chunks_respect_the_character_bounds() -> None:
    limits = ConsolidationConfig(chunk_size=10, chunk_chars=100, min_chunk_chars=30)
    rows_ = [("s", f"m{i}", "user", "x" * size, "t") for i, size in
             enumerate([40, 40, 40, 500, 10, 10])]
    chunks = list(chunk_rows(rows_, limits))
    assert [[m["id"] for m in c.messages] for c in chunks] == [["m0", "m1"], ["m2"], ["m3"]]
    # m4 and m5 (20 characters) wait for a later pass: too little to compress


def test_out_of_range_settings_are_named() -> None:
    with pytest.raises(ConfigError, match=r"chunk_size = 0.*target_ratio = 1\.5"):
        ConsolidationConfig(chunk_size=0, target_ratio=1.5)


# -- applying a summary ---------------------------------------------------------------


def test_summary_becomes_a_message_and_marks_its_sources(
    client: MemoryClient, config: Config
) -> None:
    ids = append_old(client, "a", 4)
    other = append_old(client, "a", 1, start=OLD + timedelta(hours=1))
    event = summary("a", ids, content="They talked about four turns.")
    send(client, event)
    sid = event.payload["summary_id"]
    [row] = rows(config, "SELECT role, content, importance, created_at, consolidated_at "
                         "FROM messages WHERE id = ?", sid)
    first = rows(config, "SELECT created_at FROM messages WHERE id = ?", ids[0])[0][0]
    assert row == ("system", "They talked about four turns.", 0.7, first, None)
    marked = rows(config, "SELECT id, consolidated_at FROM messages WHERE consolidated_at "
                          "IS NOT NULL ORDER BY created_at")
    assert marked == [(i, event.created_at) for i in ids]
    assert rows(config, "SELECT count(*) FROM messages WHERE id = ?", other[0]) == [(1,)]
    assert sources_of(db(config), sid) == ids
    assert summary_of(db(config), ids[2]) == sid
    assert summary_of(db(config), other[0]) is None
    assert rebuild.check(config.db_path) == []


def test_summary_is_embedded_like_any_message(tmp_path: Path) -> None:
    conn = open_connection(tmp_path / "m.db")
    schema.migrate(conn)
    cur = conn.cursor()
    effects = Effects()
    message = Event(id=uuid7(), type=EventType.MESSAGE_APPENDED, session_id="a",
                    created_at=to_rfc3339(OLD),
                    payload={"message_id": "m1", "role": "user", "importance": 0.5,
                             "content": "a long enough message to be summarised"})
    apply_event(cur, message, 1, effects)
    event = summary("a", ["m1"], content="a summary")
    apply_event(cur, event, 2, effects)
    assert effects.embed == [("m1", message.payload["content"]),
                             (event.payload["summary_id"], "a summary")]


def test_an_overlapping_summary_is_superseded_not_rejected(
    client: MemoryClient, config: Config
) -> None:
    ids = append_old(client, "a", 6)
    first, second = summary("a", ids[:4]), summary("a", ids[2:6])
    send(client, first)
    send(client, second)
    assert rows(config, "SELECT count(*) FROM rejected_events") == [(0,)]
    assert rows(config, "SELECT id FROM messages WHERE role = 'system'") == [
        (first.payload["summary_id"],)]
    unconsolidated = rows(config, "SELECT id FROM messages WHERE consolidated_at IS NULL "
                                  "AND role != 'system' ORDER BY created_at")
    assert unconsolidated == [(ids[4],), (ids[5],)]  # left for the next pass
    assert rebuild.check(config.db_path) == []


def _bad_summaries(ids: list[str], foreign: str) -> dict[str, tuple[Event, str]]:
    return {
        "unknown source": (summary("a", [*ids[:1], "nope"]), "unknown message nope"),
        "another session's": (summary("a", [ids[0], foreign]), "belongs to another session"),
        "no sources": (summary("a", []), "source_ids is empty"),
        "a source twice": (summary("a", [ids[0], ids[0]]), "lists a message twice"),
        "a source not text": (summary("a", [ids[0], 7]), "holds an id that must be a string"),
        "blank": (summary("a", ids, content="  \n"), "the summary is empty"),
        "not shorter": (summary("a", ids[:1], content="x" * 500), "not fewer than"),
        "bad fact": (summary("a", ids, facts=[{"category": "c", "key": "k"}]),
                     "exactly category, key and value"),
        "id taken": (summary("a", ids, summary_id=ids[0]), "already exists"),
    }


@pytest.mark.parametrize("name", sorted(_bad_summaries(["x"], "y")))
def test_bad_summaries_are_set_aside_with_their_reason(
    name: str, client: MemoryClient, config: Config
) -> None:
    ids = append_old(client, "a", 2)
    [foreign] = append_old(client, "b", 1)
    event, reason = _bad_summaries(ids, foreign)[name]
    with pytest.raises(EventsRejected) as caught:
        send(client, event)
    assert [r.event_id for r in caught.value.rejections] == [event.id]
    [(why,)] = rows(config, "SELECT reason FROM rejected_events")
    assert reason in why
    assert rows(config, "SELECT count(*) FROM messages WHERE consolidated_at IS NOT NULL "
                        "OR role = 'system'") == [(0,)]


def test_consolidated_messages_and_summaries_are_not_selected_again(
    client: MemoryClient, config: Config
) -> None:
    ids = append_old(client, "a", 4)
    send(client, summary("a", ids, content="the summary"))
    send(client, request_event(min_age_hours=0))
    assert consolidate_jobs(client) == []


def test_proposed_facts_are_carried_and_validated() -> None:
    facts = [{"category": "person", "key": "sister", "value": "Ana"}]
    assert proposed_facts({"facts": facts}) == facts
    assert proposed_facts({"facts": None}) == []


# -- the read side --------------------------------------------------------------------


def test_timeline_puts_summaries_in_place_of_older_originals(
    client: MemoryClient, config: Config
) -> None:
    ids = append_old(client, "a", 8)
    event = summary("a", ids[:6], content="the first six")
    send(client, event)
    sid = event.payload["summary_id"]

    def view(limit: int, verbatim: int) -> list[str]:
        return [row[0] for row in timeline(db(config), "a", limit, verbatim=verbatim)]

    assert view(10, 0) == [sid, ids[6], ids[7]]
    assert view(2, 0) == [ids[6], ids[7]]
    # the recency window keeps originals even when consolidated; the summary covers the rest
    assert view(10, 3) == [sid, ids[5], ids[6], ids[7]]
    assert view(10, 8) == ids  # every source shown: the summary would only repeat them
    assert len(timeline(db(config), "a", 1)[0]) == 9


def test_timeline_keeps_originals_consolidated_without_a_summary(
    client: MemoryClient, config: Config
) -> None:
    imported = Event(
        id=uuid7(), type=EventType.MESSAGE_IMPORTED, session_id="a", created_at=to_rfc3339(OLD),
        payload={"message_id": "legacy", "role": "user", "content": "from the old layout",
                 "importance": 0.5, "created_at": to_rfc3339(OLD),
                 "consolidated_at": to_rfc3339(OLD)},
    )
    send(client, imported)
    assert [row[0] for row in timeline(db(config), "a", 5)] == ["legacy"]
