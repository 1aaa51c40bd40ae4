"""``memq backfill-embeddings``: read-only candidates, enqueued once, failures on request."""

from __future__ import annotations

import time
from pathlib import Path

import numpy as np
import orjson
import pytest
import redis
from rq import Queue
from rq.job import Job

from memq import MemoryClient, names
from memq.cli import main
from memq.clock import now_rfc3339, uuid7
from memq.config import Config
from memq.events import Event, EventType
from memq.store import vectors
from memq.store.dispatch import embed_jobs
from memq.testing import WriterThread, free_port

pytestmark = pytest.mark.redis


def result(etype: str, mid: str, model: str) -> Event:
    payload = ({"message_id": mid, "model": model, "dim": 384,
                "vector_b64": vectors.to_b64(np.eye(1, 384, dtype=np.float32)[0])}
               if etype == EventType.MESSAGE_EMBEDDED
               else {"message_id": mid, "model": model, "error": "ModelError: broken"})
    return Event(id=uuid7(), type=etype, session_id=None, created_at=now_rfc3339(),
                 payload=payload)


@pytest.fixture
def history(client: MemoryClient, config: Config, writer: WriterThread) -> dict[str, str]:
    """Four messages: one embedded by the configured model, one failed, two waiting."""
    ids = dict(zip(("embedded", "failed", "waiting", "blank"),
                   (client.append("s1", "user", t) for t in ("a", "b", "c", " ")), strict=True))
    client.flush()
    broker = redis.Redis.from_url(config.redis_url)
    model = config.embed.model_name
    for event in (result(EventType.MESSAGE_EMBEDDED, ids["embedded"], model),
                  result(EventType.MESSAGE_EMBEDDING_FAILED, ids["failed"], model)):
        client.outbox.send(event)
    client.flush()
    # The writer enqueues jobs off its own thread after the commit: wait for them before
    # emptying the queue, or a job enqueued just after would survive the "loss".
    deadline = time.monotonic() + 30
    while ids["waiting"] not in embed_jobs.in_flight(broker, model):
        assert time.monotonic() < deadline, "the writer never enqueued the embed job"
        time.sleep(0.02)
    Queue(names.QUEUE_EMBED, connection=broker).empty()  # as if the jobs were lost
    return ids


def backfill(config: Config, *extra: str) -> int:
    return main(["backfill-embeddings", "--db", config.db_path,
                 "--redis-url", config.redis_url, *extra])


def queued(config: Config) -> list[tuple[str, list[str]]]:
    broker = redis.Redis.from_url(config.redis_url)
    jobs = Queue(names.QUEUE_EMBED, connection=broker).job_ids
    metas = [orjson.loads(broker.hget(Job.key_for(j), "meta")) for j in jobs]
    return [(m["model"], m["message_ids"]) for m in metas]


def test_backfill_enqueues_what_lacks_a_vector_once(
    history: dict[str, str], config: Config, capsys: pytest.CaptureFixture[str]
) -> None:
    assert backfill(config) == 0
    assert "enqueued 1 message(s) in 1 job(s)" in capsys.readouterr().out
    assert queued(config) == [(config.embed.model_name, [history["waiting"]])]
    assert backfill(config) == 0  # the job is still in flight: nothing new
    assert "enqueued 0 message(s) in 0 job(s)" in capsys.readouterr().out
    assert len(queued(config)) == 1


def test_retry_failed_includes_failed_messages(
    history: dict[str, str], config: Config
) -> None:
    assert backfill(config, "--retry-failed") == 0
    enqueued = sorted(mid for _, ids in queued(config) for mid in ids)
    assert enqueued == sorted([history["waiting"], history["failed"]])


def test_a_new_model_re_embeds_everything_but_blank_and_failed(
    history: dict[str, str], config: Config, tmp_path: Path
) -> None:
    toml = tmp_path / "memq.toml"
    toml.write_text('[embed]\nmodel_name = "other/model"\njob_batch_size = 1\n')
    assert backfill(config, "--config", str(toml)) == 0
    assert sorted(queued(config)) == sorted(
        [("other/model", [history["embedded"]]), ("other/model", [history["waiting"]])])


def test_a_missing_database_is_a_one_line_error(
    config: Config, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    code = main(["backfill-embeddings", "--db", str(tmp_path / "none.db"),
                 "--redis-url", config.redis_url])
    assert code == 1
    assert capsys.readouterr().err.strip() == f"memq: error: database not found: {tmp_path}/none.db"


def test_an_unreachable_redis_is_a_one_line_error(
    history: dict[str, str], config: Config, capsys: pytest.CaptureFixture[str]
) -> None:
    url = f"redis://127.0.0.1:{free_port()}/0"
    assert main(["backfill-embeddings", "--db", config.db_path, "--redis-url", url]) == 1
    # The test's writer thread logs to the same stderr: its lines are not the command's
    # (one of them once came first here).
    said = [line for line in capsys.readouterr().err.splitlines() if line.startswith("memq")]
    assert len(said) == 1, said
    assert said[0].startswith(f"memq: error: enqueueing embed jobs failed at {url}")


def test_an_unknown_option_is_a_usage_error(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exit_:
        main(["backfill-embeddings", "--retry-everything"])
    assert exit_.value.code == 2
