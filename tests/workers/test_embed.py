"""The embedding pipeline end to end: real Redis, real writer, real model, real workers.

Workers run in-process in burst mode where timing must be deterministic, and as real
``memq worker embed`` processes where a process must be killed.
"""

from __future__ import annotations

import dataclasses
import logging
import os
import shutil
import signal
import subprocess
import time
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path

import apsw
import numpy as np
import orjson
import pytest
import redis
from rq import Queue
from rq.job import Job
from rq.registry import FailedJobRegistry, StartedJobRegistry

from memq import MemoryClient, names
from memq.config import Config, EmbedConfig
from memq.embedding import Embedder
from memq.errors import ModelError
from memq.inbox import caught_up, committed_marks, inbox_marks
from memq.jobs import queue
from memq.store import rebuild
from memq.store.dispatch import embed_jobs
from memq.testing import WriterThread
from memq.workers import context, embed
from memq.workers.queues import worker
from tests.conftest import MODEL_DIR, ROOT, memq_command

pytestmark = [pytest.mark.redis, pytest.mark.model]

TEXTS = [
    "I went to the support group yesterday and it was so powerful.",
    "Can you book a table for two at the Thai place on Friday at 8?",
    "The build failed again: the linker cannot find libssl.",
    "Remember that my sister's birthday is on the 14th of March.",
    "ok",
]


def wait_until(condition: Callable[[], bool], what: str, timeout: float = 60.0) -> None:
    """Poll for a condition another process brings about; fail with ``what`` if it never does."""
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > deadline:
            pytest.fail(f"gave up waiting: {what}")
        time.sleep(0.02)


def wait_for_writer(broker: redis.Redis) -> None:
    """Until the writer has committed everything sent to the inbox so far."""
    marks = inbox_marks(broker)
    wait_until(lambda: caught_up(committed_marks(broker), marks),
               "the writer to apply the results")


def rows(config: Config) -> dict[str, tuple]:
    conn = apsw.Connection(config.db_path, flags=apsw.SQLITE_OPEN_READONLY)
    try:
        return {r[0]: r[1:] for r in conn.execute(
            "SELECT id, content, embedding, embedding_model, embedding_dim, embedding_error "
            "FROM messages")}
    finally:
        conn.close()


def run_burst_worker(config: Config) -> None:
    connection = redis.Redis.from_url(config.redis_url)
    context.install(context.WorkerContext(config, connection))
    worker([names.QUEUE_EMBED], connection).work(burst=True)


def failure(broker: redis.Redis, jid: str) -> str:
    result = Job.fetch(jid, connection=broker).latest_result()
    assert result is not None
    return str(result.exc_string)


def jobs_cover(broker: redis.Redis, ids: list[str]) -> bool:
    return set(ids) <= embed_jobs.in_flight(broker, EmbedConfig().model_name)


@pytest.fixture
def broker(config: Config) -> redis.Redis:
    return redis.Redis.from_url(config.redis_url)


@pytest.fixture
def fresh() -> Embedder:
    """A separate embedder, loaded apart from the worker's, to check its vectors."""
    return Embedder(EmbedConfig(model_dir=str(MODEL_DIR)))


@pytest.fixture(autouse=True)
def _uninstall_context() -> Iterator[None]:
    yield
    context.install(None)  # type: ignore[arg-type]  # tests leave no context behind


def assert_embedded(config: Config, ids: list[str], fresh: Embedder) -> None:
    found = rows(config)
    expected = fresh.embed([found[mid][0] for mid in ids])
    for mid, vector in zip(ids, expected, strict=True):
        _, blob, model, dim, error = found[mid]
        assert (len(blob), model, dim, error) == (1536, config.embed.model_name, 384, None)
        stored = np.frombuffer(blob, dtype="<f4")
        assert float(stored @ vector) > 0.999


# -- the success path -------------------------------------------------------------------


def test_appended_messages_are_embedded_by_a_burst_worker(
    client: MemoryClient, config: Config, broker: redis.Redis, fresh: Embedder
) -> None:
    ids = [client.append("s1", "user", text) for text in TEXTS * 30]
    client.flush()
    wait_until(lambda: jobs_cover(broker, ids), "the writer to enqueue embed jobs")
    run_burst_worker(config)
    wait_for_writer(broker)
    assert_embedded(config, ids, fresh)
    assert Queue(names.QUEUE_EMBED, connection=broker).count == 0


def test_a_real_worker_process_embeds(
    client: MemoryClient, config: Config, broker: redis.Redis, fresh: Embedder
) -> None:
    ids = [client.append("s2", "assistant", text) for text in TEXTS]
    client.flush()
    wait_until(lambda: jobs_cover(broker, ids), "the writer to enqueue embed jobs")
    done = subprocess.run(
        memq_command("worker", "embed", "--burst", "--redis-url", config.redis_url),
        cwd=ROOT, env=_env(), capture_output=True, timeout=120, check=False,
    )
    assert done.returncode == 0, done.stderr.decode()[-2000:]
    wait_for_writer(broker)
    assert_embedded(config, ids, fresh)


def test_a_worker_elsewhere_needs_only_redis_and_the_model_files(
    client: MemoryClient, config: Config, broker: redis.Redis, fresh: Embedder, tmp_path: Path
) -> None:
    # Another host: no database, no memq.toml, no data directory; a long tool output among
    # the chat turns gets one vector, of its first 256 tokens.
    tool_output = "\n".join(f"2025-03-01T10:{i:02d}:00Z INFO [billing.invoices] batch {i} "
                            f"committed request_id={i * 7919:08x}" for i in range(60))
    ids = [client.append("s3", "tool" if text == tool_output else "user", text)
           for text in [*TEXTS, tool_output]]
    client.flush()
    wait_until(lambda: jobs_cover(broker, ids), "the writer to enqueue embed jobs")
    host = tmp_path / "host"
    host.mkdir()
    env = {k: v for k, v in _env().items() if k not in ("MEMQ_DB", "MEMQ_CONFIG")}
    done = subprocess.run(
        memq_command("worker", "embed", "--burst", "--redis-url", config.redis_url,
                     "--db", str(host / "nowhere" / "memq.db")),
        cwd=host, env=env, capture_output=True, timeout=120, check=False,
    )
    assert done.returncode == 0, done.stderr.decode()[-2000:]
    wait_for_writer(broker)
    assert_embedded(config, ids, fresh)
    assert list(host.iterdir()) == []  # it wrote nothing where it ran


def test_blank_messages_are_not_embedded_and_get_no_error(
    client: MemoryClient, config: Config, broker: redis.Redis
) -> None:
    blank = [client.append("s1", "tool", text) for text in ("", "   ", "\n\t ")]
    real = client.append("s1", "user", "something to embed")
    client.flush()
    wait_until(lambda: jobs_cover(broker, [real]), "the writer to enqueue embed jobs")
    assert not set(blank) & embed_jobs.in_flight(broker, config.embed.model_name)
    run_burst_worker(config)
    wait_for_writer(broker)
    found = rows(config)
    assert [found[mid][1:] for mid in blank] == [(None, None, None, None)] * 3
    assert len(found[real][1]) == 1536


def test_the_worker_skips_blank_content_itself(config: Config, broker: redis.Redis) -> None:
    context.install(context.WorkerContext(config, broker))
    before = inbox_marks(broker)
    counts = embed.embed_messages(config.embed.model_name,
                                  [{"message_id": "m1", "content": " \n "}])
    assert counts == {"embedded": 0, "failed": 0, "skipped": 1}
    assert inbox_marks(broker) == before  # nothing was sent


# -- failures -----------------------------------------------------------------------------


@pytest.fixture
def broken_model(tmp_path: Path) -> Path:
    """A model directory whose ONNX file is damaged (a bad copy on one host)."""
    broken = tmp_path / "broken-model"
    shutil.copytree(MODEL_DIR, broken)
    (broken / "model.onnx").write_bytes(b"not a model")
    return broken


def test_a_worker_that_cannot_embed_retries_then_records_the_error(
    client: MemoryClient, config: Config, broker: redis.Redis, broken_model: Path,
    caplog: pytest.LogCaptureFixture,
) -> None:
    ids = [client.append("s1", "user", text) for text in TEXTS[:3]]
    client.flush()
    wait_until(lambda: jobs_cover(broker, ids), "the writer to enqueue embed jobs")
    jobs = Queue(names.QUEUE_EMBED, connection=broker).count  # the writer may split them
    embed_config = dataclasses.replace(config.embed, model_dir=str(broken_model),
                                       max_retries=2, retry_backoff_s=0.01)
    with caplog.at_level(logging.WARNING, logger="memq.worker.embed"):
        run_burst_worker(config.replace(embed=embed_config))
    wait_for_writer(broker)
    retries = [r for r in caplog.records if r.getMessage() == "embedding failed, retrying"]
    assert len(retries) == 2 * jobs  # max_retries per job, then the failure is recorded
    found = rows(config)
    for mid in ids:
        _, blob, _, _, error = found[mid]
        assert blob is None
        assert error.startswith("ModelError: ")
        assert "model.onnx" in error
    # Failed messages are not retried by the reconcile pass (only by --retry-failed).
    assert embed_jobs.in_flight(broker, config.embed.model_name) == set()


class RefusingEmbedder(Embedder):
    """The real model, except for one text it cannot take.

    The one stand-in in this file, at the model boundary: no real text makes this model
    fail here (the tokenizer truncates and accepts any valid text), yet a model that
    chokes on one input is what the worker's one-by-one fallback exists for.
    """

    REFUSED = "a turn the model cannot take"

    def embed(self, texts: Sequence[str]) -> np.ndarray:
        if self.REFUSED in texts:
            raise ModelError("the model rejected this input")
        return super().embed(texts)


def test_one_message_the_model_cannot_take_does_not_fail_its_batch(
    client: MemoryClient, config: Config, broker: redis.Redis, fresh: Embedder,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    texts = [*TEXTS[:2], RefusingEmbedder.REFUSED, *TEXTS[2:4]]
    with client.batched():
        ids = [client.append("s1", "user", text) for text in texts]
    client.flush()
    wait_until(lambda: jobs_cover(broker, ids), "the writer to enqueue embed jobs")
    # The writer may read the five entries in two reads (and enqueue two jobs) when the
    # machine is loaded; the point here is one job holding all five, so make it so.
    pending = Queue(names.QUEUE_EMBED, connection=broker)
    pending.empty()
    assert embed_jobs.enqueue(broker, config.embed.model_name,
                              list(zip(ids, texts, strict=True)), 64) == 1
    embed_config = dataclasses.replace(config.embed, max_retries=1, retry_backoff_s=0.01)
    monkeypatch.setattr(embed, "_embedder", RefusingEmbedder(embed_config))
    run_burst_worker(config.replace(embed=embed_config))
    wait_for_writer(broker)
    refused = ids.pop(2)
    assert_embedded(config, ids, fresh)  # the other four got their real vectors
    _, blob, _, _, error = rows(config)[refused]
    assert (blob, error) == (None, "ModelError: the model rejected this input")


def test_a_job_naming_another_model_fails_without_marking_the_messages(
    config: Config, broker: redis.Redis
) -> None:
    embed_jobs.enqueue(broker, "other/model", [("m1", "hello")], 64)
    run_burst_worker(config)
    failed = FailedJobRegistry(names.QUEUE_EMBED, connection=broker)
    [jid] = failed.get_job_ids()
    assert "job asks for model 'other/model'" in failure(broker, jid)
    assert sum(broker.xlen(stream) for stream in names.INBOX_STREAMS) == 0


@pytest.mark.parametrize("func", ["os.getcwd", "memq.workers.embed.embedder"])
def test_a_job_naming_a_function_outside_memq_jobs_is_refused(
    config: Config, broker: redis.Redis, func: str
) -> None:
    job = queue(names.QUEUE_EMBED, broker).enqueue_call(func, job_id="planted")
    run_burst_worker(config)
    assert job.get_status(refresh=True) == "failed"
    assert "is not a memq job" in failure(broker, "planted")


def test_a_job_with_malformed_messages_fails_with_the_reason(
    config: Config, broker: redis.Redis
) -> None:
    queue(names.QUEUE_EMBED, broker).enqueue_call(
        embed_jobs.EMBED_FUNCTION, kwargs={"model": config.embed.model_name,
                                           "messages": [{"message_id": 1}]}, job_id="bad")
    run_burst_worker(config)
    assert "each message must be {message_id, content}" in failure(broker, "bad")


# -- a worker killed mid-job --------------------------------------------------------------


def _env() -> dict[str, str]:
    return {**os.environ, "MEMQ_EMBED_MODEL_DIR": str(MODEL_DIR), "PYTHONPATH": str(ROOT)}


@pytest.mark.faults
@pytest.mark.slow
def test_a_worker_killed_mid_job_leaves_nothing_behind(
    config: Config, broker: redis.Redis, fresh: Embedder
) -> None:
    config = config.replace(
        embed=dataclasses.replace(config.embed, job_batch_size=300),
        writer=dataclasses.replace(config.writer, reconcile_interval_s=0.1),
    )
    running = WriterThread(config)
    running.start()
    try:
        with MemoryClient(config=config) as client, client.batched():
            ids = [client.append("s1", "user", f"{TEXTS[i % 4]} ({i})") for i in range(300)]
        wait_until(lambda: jobs_cover(broker, ids), "the writer to enqueue embed jobs")
        killed = _kill_mid_job(config, broker)
        # The periodic reconcile sees the job's worker gone and enqueues the messages again,
        # under the same deterministic id (the abandoned job is replaced, not doubled).
        wait_until(lambda: killed in Queue(names.QUEUE_EMBED, connection=broker).job_ids,
                   "the reconcile pass to enqueue the abandoned messages")
        started = StartedJobRegistry(names.QUEUE_EMBED, connection=broker)
        assert started.get_job_ids(cleanup=False) == []  # or RQ would later "abandon" it
        restarted = subprocess.run(
            memq_command("worker", "embed", "--burst", "--redis-url", config.redis_url),
            cwd=ROOT, env=_env(), capture_output=True, timeout=300, check=False)
        assert restarted.returncode == 0, restarted.stderr.decode()[-2000:]
        wait_until(lambda: all(r[1] is not None for r in rows(config).values()),
                   "every message to be embedded")
    finally:
        running.stop()
    assert_embedded(config, ids, fresh)
    # Embedded once into the projection: the re-run job's second vector changed nothing.
    conn = apsw.Connection(config.db_path, flags=apsw.SQLITE_OPEN_READONLY)
    try:
        projected = dict(conn.execute("SELECT id, embedded_seq FROM messages").fetchall())
        first: dict[str, int] = {}
        for seq, payload in conn.execute("SELECT seq, payload FROM events WHERE type = "
                                         "'message.embedded' ORDER BY seq"):
            first.setdefault(orjson.loads(payload)["message_id"], seq)
    finally:
        conn.close()
    assert projected == {mid: first[mid] for mid in ids}
    assert rebuild.check(config.db_path) == []


def _kill_mid_job(config: Config, broker: redis.Redis) -> str:
    """Start a worker, SIGKILL it while it runs a job; returns the job's id."""
    name = "doomed-worker"
    proc = subprocess.Popen(
        memq_command("worker", "embed", "--name", name, "--redis-url", config.redis_url),
        cwd=ROOT, env=_env(), stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    started = StartedJobRegistry(names.QUEUE_EMBED, connection=broker)
    running: list[str] = []
    try:
        wait_until(lambda: started.count > 0, "the worker to start the job")
        # Read while it runs: once the worker is dead, whatever notices first may move the
        # entry (on a loaded run it was gone before the test looked).
        running = started.get_job_ids(cleanup=False)
    finally:
        proc.send_signal(signal.SIGKILL)
        proc.wait(30)
    [killed] = running
    assert [r[1] for r in rows(config).values()] == [None] * 300  # no vector came back
    wait_until(lambda: name not in {c.get("name") for c in broker.client_list()},
               "Redis to notice the dead worker's connection")
    return str(killed)


def test_a_worker_process_keeps_its_name_across_reconnections(
    config: Config, broker: redis.Redis
) -> None:
    # The reconcile pass judges a started job's worker alive by its connection's name.
    def named() -> list[dict]:
        return [c for c in broker.client_list() if c.get("name") == "steady-worker"]

    proc = subprocess.Popen(
        memq_command("worker", "embed", "--name", "steady-worker", "--redis-url",
                     config.redis_url),
        cwd=ROOT, env=_env(), stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        wait_until(lambda: broker.hget("rq:worker:steady-worker", "state") == b"idle",
                   "the worker to wait for jobs")
        before = {c["id"] for c in named()}
        for client_id in before:
            broker.client_kill_filter(_id=client_id)  # a network blip
        wait_until(lambda: bool(named()) and not {c["id"] for c in named()} & before,
                   "the worker to reconnect")
    finally:
        proc.terminate()
        proc.wait(30)
    assert proc.returncode == 0
