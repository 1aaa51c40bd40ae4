"""Prometheus metrics: the writer's figures in Redis, the exposition text, ``memq metrics``."""

from __future__ import annotations

import threading
import urllib.error
import urllib.request

import pytest
import redis

from memq import MemoryClient, metrics, names
from memq.cli.metrics import make_server
from memq.config import Config
from memq.testing import WriterThread


def parse(text: str) -> dict[str, float]:
    """Sample lines of the exposition format, keyed by name and labels."""
    samples = {}
    for line in text.splitlines():
        if line and not line.startswith("#"):
            key, value = line.rsplit(" ", 1)
            samples[key] = float(value)
    return samples


def test_render_follows_the_text_format() -> None:
    family = metrics.Family("memq_x", "gauge", "An example")
    family.add(3, queue='a"b\\c\nd').add(float("inf"), queue="e").add(0.25)
    assert metrics.render([family]).splitlines() == [
        "# HELP memq_x An example",
        "# TYPE memq_x gauge",
        'memq_x{queue="a\\"b\\\\c\\nd"} 3',
        'memq_x{queue="e"} +Inf',
        "memq_x 0.25",
    ]


def test_histograms_are_cumulative_and_counted() -> None:
    raw = {b"batches": b"3", b"apply_bucket:0.001": b"1", b"apply_bucket:0.05": b"1",
           b"apply_bucket:+Inf": b"1", b"apply_seconds_sum": b"7.5",
           b"size_bucket:1": b"2", b"size_bucket:500": b"1", b"batch_size_sum": b"402"}
    samples = parse(metrics.render(metrics.writer_families(raw)))
    assert samples['memq_writer_apply_seconds_bucket{le="0.001"}'] == 1
    assert samples['memq_writer_apply_seconds_bucket{le="0.025"}'] == 1
    assert samples['memq_writer_apply_seconds_bucket{le="0.05"}'] == 2
    assert samples['memq_writer_apply_seconds_bucket{le="+Inf"}'] == 3
    assert samples["memq_writer_apply_seconds_count"] == 3
    assert samples["memq_writer_apply_seconds_sum"] == 7.5
    assert samples['memq_writer_batch_size_bucket{le="250"}'] == 2
    assert samples['memq_writer_batch_size_bucket{le="500"}'] == 3
    assert samples["memq_writer_batch_size_sum"] == 402


def test_empty_stats_render_as_zeros() -> None:
    samples = parse(metrics.render(metrics.writer_families({})))
    assert samples["memq_writer_batches_total"] == 0
    assert samples['memq_writer_apply_seconds_bucket{le="+Inf"}'] == 0


@pytest.mark.redis
def test_writer_publishes_its_batches(client: MemoryClient, config: Config) -> None:
    for i in range(20):
        client.append("s1", "user", f"m{i}")
    client.flush()
    raw = redis.Redis.from_url(config.redis_url).hgetall(names.WRITER_STATS_KEY)
    samples = parse(metrics.render(metrics.writer_families(raw)))
    batches = samples["memq_writer_batches_total"]
    assert batches >= 1
    assert samples['memq_writer_events_total{outcome="applied"}'] == 20
    assert samples['memq_writer_events_applied_total{type="message.appended"}'] == 20
    assert samples["memq_writer_batch_size_sum"] == 20
    assert samples["memq_writer_batch_size_count"] == batches
    assert samples['memq_writer_apply_seconds_bucket{le="+Inf"}'] == batches


@pytest.mark.redis
def test_rejected_events_are_counted(client: MemoryClient, config: Config) -> None:
    connection = redis.Redis.from_url(config.redis_url)
    connection.xadd(names.INBOX_STREAM, {names.EVENT_FIELD: b"not json"})
    client.append("s1", "user", "after")
    client.flush()
    raw = connection.hgetall(names.WRITER_STATS_KEY)
    samples = parse(metrics.render(metrics.writer_families(raw)))
    assert samples['memq_writer_events_total{outcome="rejected"}'] == 1


@pytest.fixture
def served(config: Config):
    server = make_server(config, "127.0.0.1", 0)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{server.server_port}"
    server.shutdown()
    server.server_close()


@pytest.mark.redis
def test_metrics_endpoint_serves_every_family(config: Config, served: str) -> None:
    running = WriterThread(config)
    running.start()
    with MemoryClient(config=config) as memory:
        memory.append("s1", "user", "hello")
        memory.flush()
    running.stop()
    with MemoryClient(config=config) as memory:  # a backlog: the writer is stopped
        memory.append("s1", "user", "waiting")
    with urllib.request.urlopen(f"{served}/metrics") as response:
        assert response.headers["Content-Type"] == metrics.CONTENT_TYPE
        samples = parse(response.read().decode())
    assert samples["memq_inbox_entries"] == 1
    assert samples["memq_inbox_lag_entries"] == 1
    assert samples['memq_queue_jobs{queue="memq-embed",state="failed"}'] == 0
    assert samples['memq_workers{queue="memq-embed"}'] == 0
    assert samples['memq_messages{state="pending"}'] == 1
    assert 0 <= samples["memq_embedding_oldest_pending_age_seconds"] < 300
    assert samples['memq_collect_ok{source="database"}'] == 1
    assert samples['memq_database_bytes{file="db"}'] > 0
    assert samples['memq_writer_events_total{outcome="applied"}'] == 1
    assert "memq_writer_apply_seconds_count" in samples


@pytest.mark.redis
def test_metrics_endpoint_reports_what_it_cannot_read(config: Config, served: str) -> None:
    with urllib.request.urlopen(f"{served}/metrics") as response:
        samples = parse(response.read().decode())
    assert samples['memq_collect_ok{source="database"}'] == 0  # no database yet
    assert samples['memq_collect_ok{source="redis"}'] == 1
    with pytest.raises(urllib.error.HTTPError, match="404"):
        urllib.request.urlopen(f"{served}/other")
