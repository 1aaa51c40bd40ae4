"""Enqueueing embed jobs after commit, deterministic ids, and the reconcile pass.

These tests run the real writer against a real Redis; they do not run the model (the
worker side is in tests/workers/test_embed.py).
"""

from __future__ import annotations

import threading
import zlib
from collections.abc import Iterator

import apsw
import numpy as np
import orjson
import pytest
import redis
from rq import Queue
from rq.job import Job

from memq import MemoryClient, names
from memq.clock import now_rfc3339, uuid7
from memq.config import Config, EmbedConfig
from memq.errors import ConfigError
from memq.events import Event, EventType, encode
from memq.jobs import JOB_FUNCTIONS
from memq.store import schema, vectors
from memq.store.connection import open_connection
from memq.store.dispatch import embed_backlog, embed_jobs
from memq.store.dispatch.embed_backlog import EmbedBacklog, Snapshot
from memq.store.dispatch.embed_jobs import EMBED_FUNCTION
from memq.store.write import batch
from memq.store.write.service import open_writer
from memq.store.write.writer import Writer

pytestmark = pytest.mark.redis

MODEL = EmbedConfig().model_name


@pytest.fixture
def small_jobs(config: Config) -> Config:
    return config.replace(embed=EmbedConfig(model_dir=config.embed.model_dir, job_batch_size=4))


@pytest.fixture
def broker(config: Config) -> redis.Redis:
    return redis.Redis.from_url(config.redis_url)


@pytest.fixture
def stepped(small_jobs: Config, broker: redis.Redis) -> Iterator[Writer]:
    """A real writer with its hooks, driven one batch at a time by the test."""
    writer = open_writer(small_jobs, broker)
    writer.inbox.ensure_group()
    yield writer
    writer.close()


def backlog_of(writer: Writer) -> EmbedBacklog:
    return next(r.__self__ for r in writer.reconcilers if isinstance(r.__self__, EmbedBacklog))


def append(config: Config, *contents: str) -> list[str]:
    with MemoryClient(config=config) as client, client.batched():
        return [client.append("s1", "user", text) for text in contents]


def queued(broker: redis.Redis) -> list[Job]:
    return Queue(names.QUEUE_EMBED, connection=broker).get_jobs()


def queued_ids(broker: redis.Redis) -> list[list[str]]:
    return [job_meta(broker, job.id)["message_ids"] for job in queued(broker)]


def job_meta(broker: redis.Redis, jid: str) -> dict:
    return orjson.loads(broker.hget(Job.key_for(jid), "meta"))


def drain(writer: Writer) -> None:
    while writer.step().size:
        pass


# -- deterministic ids ----------------------------------------------------------------


def test_job_ids_are_deterministic() -> None:
    ids = [uuid7() for _ in range(3)]
    assert embed_jobs.job_id(MODEL, ids) == embed_jobs.job_id(MODEL, list(ids))
    assert embed_jobs.job_id(MODEL, ids) != embed_jobs.job_id(MODEL, ids[::-1])
    assert embed_jobs.job_id(MODEL, ids) != embed_jobs.job_id("other/model", ids)
    assert ":" not in embed_jobs.job_id(MODEL, ids)  # RQ splits registry entries on ':'


def test_the_job_function_is_the_registered_worker_function() -> None:
    assert EMBED_FUNCTION in JOB_FUNCTIONS


# -- after commit ---------------------------------------------------------------------


def test_new_messages_are_enqueued_in_json_jobs_of_the_configured_size(
    stepped: Writer, small_jobs: Config, broker: redis.Redis
) -> None:
    ids = append(small_jobs, *[f"message {i}" for i in range(10)])
    drain(stepped)
    jobs = queued(broker)
    assert [job_meta(broker, j.id)["message_ids"] for j in jobs] == [ids[:4], ids[4:8], ids[8:]]
    first = jobs[0]
    assert first.id == embed_jobs.job_id(MODEL, ids[:4])
    # JSON, never pickle: the stored call is readable JSON naming the function by path.
    func, _, args, kwargs = orjson.loads(zlib.decompress(broker.hget(first.key, "data")))
    assert func == EMBED_FUNCTION
    assert args == []
    assert kwargs == {"model": MODEL, "messages": [
        {"message_id": mid, "content": f"message {i}"} for i, mid in enumerate(ids[:4])]}


def test_blank_messages_get_no_job(
    stepped: Writer, small_jobs: Config, broker: redis.Redis
) -> None:
    append(small_jobs, "", "   ", "\n\t \r", "\u3000\u2003")
    drain(stepped)
    backlog_of(stepped).reconcile()
    assert queued(broker) == []
    assert backlog_of(stepped).last_pass == 0


def test_enqueueing_the_same_messages_twice_queues_one_job(broker: redis.Redis) -> None:
    messages = [(uuid7(), "hello"), (uuid7(), "world")]
    assert embed_jobs.enqueue(broker, MODEL, messages, 64) == 1
    assert embed_jobs.enqueue(broker, MODEL, messages, 64) == 0
    assert broker.llen(f"rq:queue:{names.QUEUE_EMBED}") == 1


def test_a_mix_of_new_and_existing_jobs_queues_each_id_once(
    broker: redis.Redis, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(embed_jobs, "JOBS_PER_ROUND_TRIP", 2)
    messages = [(uuid7(), f"m{i}") for i in range(7)]
    assert embed_jobs.enqueue(broker, MODEL, messages[2:4], 2) == 1
    assert embed_jobs.enqueue(broker, MODEL, messages, 2) == 3  # 4 jobs, one already queued
    jobs = broker.lrange(f"rq:queue:{names.QUEUE_EMBED}", 0, -1)
    assert len(jobs) == len(set(jobs)) == 4


def test_a_concurrent_enqueuer_of_the_same_job_does_not_double_it(
    config: Config, broker: redis.Redis, monkeypatch: pytest.MonkeyPatch
) -> None:
    messages = [(uuid7(), "hello"), (uuid7(), "world")]
    rival = redis.Redis.from_url(config.redis_url)  # e.g. backfill-embeddings, elsewhere
    checked = embed_jobs._existing
    rival_added: list[int] = []

    def racing(pipe: object, keys: list[str]) -> list[bool]:
        answer = checked(pipe, keys)
        monkeypatch.setattr(embed_jobs, "_existing", checked)  # the rival runs unhindered
        # ...and its enqueue lands between our check and our EXEC.
        rival_added.append(embed_jobs.enqueue(rival, MODEL, messages, 64))
        return answer

    monkeypatch.setattr(embed_jobs, "_existing", racing)
    assert embed_jobs.enqueue(broker, MODEL, messages, 64) == 0  # the rival's job stands
    assert rival_added == [1]
    assert broker.lrange(f"rq:queue:{names.QUEUE_EMBED}", 0, -1) == [
        embed_jobs.job_id(MODEL, [m for m, _ in messages]).encode()]


def test_rq_plain_enqueue_would_queue_an_existing_id_twice(broker: redis.Redis) -> None:
    # Why embed_jobs uses unique enqueues: if this ever stops holding, the guard is moot.
    queue = Queue("canary", connection=broker)
    queue.enqueue_call("os.getcwd", job_id="same")
    queue.enqueue_call("os.getcwd", job_id="same")
    assert broker.lrange("rq:queue:canary", 0, -1) == [b"same", b"same"]


def test_a_failed_job_is_replaced_not_skipped(broker: redis.Redis) -> None:
    messages = [(uuid7(), "hello")]
    embed_jobs.enqueue(broker, MODEL, messages, 64)
    jid = embed_jobs.job_id(MODEL, [messages[0][0]])
    job = Job.fetch(jid, connection=broker)
    queue = Queue(names.QUEUE_EMBED, connection=broker)
    queue.remove(job)
    with broker.pipeline() as pipe:  # what RQ records when a job fails for good
        job.set_status("failed", pipeline=pipe)
        pipe.execute()
    assert embed_jobs.in_flight(broker, MODEL) == set()
    assert embed_jobs.enqueue(broker, MODEL, messages, 64) == 1
    assert Job.fetch(jid, connection=broker).get_status() == "queued"
    assert embed_jobs.in_flight(broker, MODEL) == {messages[0][0]}


def test_in_flight_counts_only_jobs_for_the_configured_model(broker: redis.Redis) -> None:
    ours, theirs = (uuid7(), "a"), (uuid7(), "b")
    embed_jobs.enqueue(broker, MODEL, [ours], 64)
    embed_jobs.enqueue(broker, "other/model", [theirs], 64)
    assert embed_jobs.in_flight(broker, MODEL) == {ours[0]}


# -- reconcile ----------------------------------------------------------------------------


def test_reconcile_fills_the_hole_left_by_a_crash_between_commit_and_enqueue(
    small_jobs: Config, broker: redis.Redis
) -> None:
    ids = append(small_jobs, *[f"turn {i}" for i in range(6)])
    crashed = Writer.open(small_jobs, broker)  # commits, then "dies" before any enqueue
    crashed.inbox.ensure_group()
    drain(crashed)
    crashed.close()
    assert queued(broker) == []

    writer = open_writer(small_jobs, broker)
    try:
        writer.reconcile()  # what run() does first
        assert sorted(mid for job in queued_ids(broker) for mid in job) == sorted(ids)
        writer.reconcile()  # everything is in flight now: nothing more
        assert backlog_of(writer).last_pass == 0
        assert len(queued(broker)) == 2
    finally:
        writer.close()


def test_reconcile_waits_for_results_still_in_the_inbox(
    stepped: Writer, small_jobs: Config, broker: redis.Redis
) -> None:
    [mid] = append(small_jobs, "hello there")
    drain(stepped)
    # A worker finished the job and sent its result, which the writer has not applied yet.
    Queue(names.QUEUE_EMBED, connection=broker).empty()
    broker.xadd(names.WORKER_INBOX_STREAM, {names.EVENT_FIELD: encode(embedded(mid))})
    backlog = backlog_of(stepped)
    backlog.reconcile()
    assert backlog.pending is not None  # the snapshot waits for the inbox
    assert queued(broker) == []
    drain(stepped)  # applies the vector; the after-commit hook finishes the pass
    assert backlog.pending is None
    assert backlog.last_pass == 0
    assert queued(broker) == []


def test_a_message_whose_job_vanished_is_enqueued_again(
    stepped: Writer, small_jobs: Config, broker: redis.Redis
) -> None:
    ids = append(small_jobs, "one", "two")
    drain(stepped)
    Queue(names.QUEUE_EMBED, connection=broker).empty()  # e.g. Redis lost its queues
    backlog_of(stepped).reconcile()
    assert backlog_of(stepped).last_pass == 2
    assert queued_ids(broker) == [ids]


def test_reconcile_survives_redis_refusing(stepped: Writer, broker: redis.Redis) -> None:
    broker.set(f"rq:queue:{names.QUEUE_EMBED}", "not a list")  # WRONGTYPE on LRANGE
    stepped.reconcile()  # logs and carries on; the writer must not die here
    assert backlog_of(stepped).pending is None


def embedded(mid: str, model: str = MODEL) -> Event:
    """What a worker sends (a unit vector stands in: no test here reads its meaning)."""
    vector = np.zeros(384, dtype=np.float32)
    vector[0] = 1.0
    b64 = vectors.to_b64(vector)
    return Event(id=uuid7(), type=EventType.MESSAGE_EMBEDDED, session_id=None,
                 created_at=now_rfc3339(),
                 payload={"message_id": mid, "model": model, "dim": 384, "vector_b64": b64})


def failed(mid: str, model: str = MODEL) -> Event:
    return Event(id=uuid7(), type=EventType.MESSAGE_EMBEDDING_FAILED, session_id=None,
                 created_at=now_rfc3339(),
                 payload={"message_id": mid, "model": model, "error": "boom"})


# -- candidates ---------------------------------------------------------------------------


def send(config: Config, *events: Event) -> None:
    broker = redis.Redis.from_url(config.redis_url)
    for event in events:
        broker.xadd(names.ADMIN_INBOX_STREAM, {names.EVENT_FIELD: encode(event)})


def read(config: Config) -> apsw.Connection:
    return open_connection(config.db_path, readonly=True)


def test_candidates_are_unembedded_or_other_model_and_failures_on_request(
    stepped: Writer, small_jobs: Config
) -> None:
    fresh, ours, old, broken, blank = append(small_jobs, "a", "b", "c", "d", " ")
    send(small_jobs, embedded(ours), embedded(old, "old/model"), failed(broken))
    drain(stepped)
    conn = read(small_jobs)
    up_to = embed_backlog.log_position(conn)
    found = [mid for mid, _ in embed_backlog.candidates(conn, MODEL, up_to)]
    assert found == [fresh, old]
    with_failed = embed_backlog.candidates(conn, MODEL, up_to, include_failed=True)
    assert [mid for mid, _ in with_failed] == [fresh, old, broken]
    assert embed_backlog.count_candidates(conn, MODEL, up_to) == 2
    assert embed_backlog.count_candidates(conn, MODEL, up_to, include_failed=True) == 3
    # Another configured model wants everything that is not blank and not failed.
    assert {m for m, _ in embed_backlog.candidates(conn, "new/model", up_to)} == {
        fresh, ours, old}
    assert blank not in {m for m, _ in embed_backlog.candidates(conn, "new/model", up_to)}
    # Only messages up to the snapshot's log position (``fresh`` is the first event).
    assert [m for m, _ in embed_backlog.candidates(conn, MODEL, 1)] == [fresh]
    assert [m for m, _ in embed_backlog.candidates(conn, MODEL, 0)] == []


def test_candidates_page_through_many_rows(
    stepped: Writer, small_jobs: Config, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(embed_backlog, "PAGE_SIZE", 3)
    ids = append(small_jobs, *[f"m{i}" for i in range(10)])
    drain(stepped)
    conn = read(small_jobs)
    found = embed_backlog.candidates(conn, MODEL, embed_backlog.log_position(conn))
    assert [mid for mid, _ in found] == ids


def test_failure_to_re_embed_with_a_new_model_is_recorded_and_keeps_the_old_vector(
    stepped: Writer, small_jobs: Config
) -> None:
    [mid] = append(small_jobs, "a")
    send(small_jobs, embedded(mid, "old/model"), failed(mid, MODEL), failed(mid, "old/model"))
    drain(stepped)
    row = read(small_jobs).execute(
        "SELECT embedding_model, embedding_error, length(embedding) FROM messages").fetchone()
    assert row == ("old/model", "boom", 1536)


class Explaining:
    """A connection stand-in that records the query plan of every query it runs."""

    def __init__(self, conn: apsw.Connection) -> None:
        self.conn = conn
        self.plans: list[str] = []

    def execute(self, sql: str, bindings: tuple = ()) -> apsw.Cursor:
        rows = self.conn.execute("EXPLAIN QUERY PLAN " + sql, bindings).fetchall()
        self.plans.append(" ".join(str(r[-1]) for r in rows))
        return self.conn.execute(sql, bindings)


def test_backlog_queries_use_the_partial_indexes(stepped: Writer, small_jobs: Config) -> None:
    [mid] = append(small_jobs, "a")
    send(small_jobs, embedded(mid, "old/model"))
    drain(stepped)
    conn = Explaining(read(small_jobs))
    list(embed_backlog.candidates(conn, MODEL, 10, include_failed=True))  # type: ignore[arg-type]
    assert len(conn.plans) >= 5  # unembedded, two model seeks, old/model's rows, failed
    assert all("USING INDEX messages_embedding_" in p for p in conn.plans), conn.plans


def test_the_migration_is_recorded(stepped: Writer) -> None:
    assert "0006_embedding_backlog_index" in schema.applied(stepped.conn)


def test_snapshot_of_an_empty_system(stepped: Writer, broker: redis.Redis) -> None:
    snapshot = Snapshot.take(stepped.conn, broker, MODEL)
    assert snapshot.up_to_seq == 0
    assert snapshot.results_applied(broker)


@pytest.mark.parametrize("bad", [
    {"job_batch_size": 0}, {"max_retries": -1}, {"retry_backoff_s": -0.5}])
def test_bad_embed_settings_are_refused(bad: dict) -> None:
    with pytest.raises(ConfigError, match=r"\[embed\]"):
        EmbedConfig(**bad)


def test_reconcile_waits_for_jobs_still_being_enqueued_in_the_background(
    stepped: Writer, small_jobs: Config, broker: redis.Redis
) -> None:
    # Two batches whose jobs are still on their way to Redis when a reconcile pass starts:
    # had it not waited, it would have chunked the six messages differently ([3+1], [2])
    # and queued each of them a second time.
    gate = threading.Event()
    stepped.background.submit(gate.wait)
    for texts in (("a1", "a2", "a3"), ("b1", "b2", "b3")):
        append(small_jobs, *texts)
        entries = stepped.inbox.read_new()
        stepped.commit(entries, batch.decode_entries(entries, small_jobs.limits))
    assert queued(broker) == []  # held up behind the gate
    threading.Timer(0.2, gate.set).start()
    stepped.reconcile()
    assert backlog_of(stepped).last_pass == 0
    assert sorted(len(ids) for ids in queued_ids(broker)) == [3, 3]
