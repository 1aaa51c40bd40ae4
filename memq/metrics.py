"""Prometheus metrics: the writer's batch figures and the text exposition format.

The writer is a process of its own, so it publishes its figures to a Redis hash
(:data:`memq.names.WRITER_STATS_KEY`) inside the same ``MULTI`` that acknowledges a batch:
the counters move only for committed batches, and any number of ``memq metrics`` processes
can read them. ``memq metrics`` renders them, with the queues, the inbox and the database,
in Prometheus text format on each scrape.

Metric names (every one starts with ``memq_``):

==========================================  =========  ====================================
name                                        type       what
==========================================  =========  ====================================
memq_inbox_entries                          gauge      entries in the inbox streams
memq_inbox_lag_entries                      gauge      entries the writer has not read yet
memq_inbox_pending_entries                  gauge      read by the writer, not committed
memq_inbox_oldest_age_seconds               gauge      age of the oldest entry (writer lag)
memq_writer_up                              gauge      1 while the writer's heartbeat is fresh
memq_writer_last_batch_lag_seconds          gauge      send-to-read lag of the last batch
memq_writer_batches_total                   counter    committed batches
memq_writer_events_total{outcome}           counter    applied / duplicate / rejected
memq_writer_events_applied_total{type}      counter    applied events by type
memq_writer_batch_size                      histogram  entries per batch
memq_writer_apply_seconds                   histogram  time to apply and commit a batch
memq_queue_jobs{queue,state}                gauge      RQ jobs by state
memq_workers{queue}                         gauge      RQ workers serving each queue
memq_messages{state}                        gauge      embedded / pending / failed / empty
memq_embedding_oldest_pending_age_seconds   gauge      oldest message waiting for a vector
memq_rejected_events                        gauge      rejected events not yet replayed
memq_sessions                               gauge      sessions with at least one message
memq_database_bytes{file}                   gauge      size of the database and of its WAL
memq_collect_ok{source}                     gauge      1 if redis / database could be read
==========================================  =========  ====================================

Embedding throughput is ``rate(memq_writer_events_applied_total{type="message.embedded"}[1m])``;
an alert on embedding falling behind: ``memq_embedding_oldest_pending_age_seconds > 300``.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any, Protocol

from memq.names import WRITER_STATS_KEY

APPLY_SECONDS_BUCKETS = (0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0)
"""Upper bounds of the apply-latency histogram, in seconds."""

BATCH_SIZE_BUCKETS = (1, 5, 10, 50, 100, 250, 500, 1000, 2500, 5000)
"""Upper bounds of the batch-size histogram, in entries."""

CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"


class HashPipeline(Protocol):
    """The three hash commands of a Redis pipeline the writer hands in."""

    def hincrby(self, name: str, key: str, amount: int = 1) -> Any: ...
    def hincrbyfloat(self, name: str, key: str, amount: float = 1.0) -> Any: ...
    def hset(self, name: str, key: Any = None, value: Any = None,
             mapping: Any = None) -> Any: ...


@dataclass(frozen=True)
class BatchFigures:
    """What one committed batch adds to the writer's figures."""

    applied: int
    duplicates: int
    rejected: int
    apply_s: float
    lag_s: float
    at: float
    types: Mapping[str, int] = field(default_factory=dict)

    @property
    def size(self) -> int:
        return self.applied + self.duplicates + self.rejected


def record_batch(pipe: HashPipeline, figures: BatchFigures) -> None:
    """Queue the updates of :data:`WRITER_STATS_KEY` for one batch on ``pipe``."""
    counts = {
        "batches": 1,
        "events_applied": figures.applied,
        "events_duplicate": figures.duplicates,
        "events_rejected": figures.rejected,
        "batch_size_sum": figures.size,
        f"size_bucket:{_bucket(figures.size, BATCH_SIZE_BUCKETS)}": 1,
        f"apply_bucket:{_bucket(figures.apply_s, APPLY_SECONDS_BUCKETS)}": 1,
        **{f"type:{etype}": n for etype, n in figures.types.items() if n},
    }
    for key, amount in counts.items():
        if amount:
            pipe.hincrby(WRITER_STATS_KEY, key, amount)
    pipe.hincrbyfloat(WRITER_STATS_KEY, "apply_seconds_sum", figures.apply_s)
    pipe.hset(WRITER_STATS_KEY, mapping={
        "last_batch_size": figures.size,
        "last_apply_seconds": round(figures.apply_s, 6),
        "last_lag_seconds": round(figures.lag_s, 3),
        "last_batch_at": round(figures.at, 3),
    })


def _bucket(value: float, bounds: tuple[float, ...]) -> str:
    for bound in bounds:
        if value <= bound:
            return _number(bound)
    return "+Inf"


# -- exposition ---------------------------------------------------------------------------

Labels = tuple[tuple[str, str], ...]


@dataclass
class Family:
    """One metric: its samples share a name prefix, a type and a help text."""

    name: str
    kind: str
    help: str
    samples: list[tuple[str, Labels, float]] = field(default_factory=list)

    def add(self, value: float, suffix: str = "", **labels: str) -> Family:
        self.samples.append((self.name + suffix, tuple(labels.items()), float(value)))
        return self


def render(families: Iterable[Family]) -> str:
    """The Prometheus text exposition format (version 0.0.4)."""
    lines: list[str] = []
    for family in families:
        lines.append(f"# HELP {family.name} {family.help}")
        lines.append(f"# TYPE {family.name} {family.kind}")
        for name, labels, value in family.samples:
            lines.append(f"{name}{_labels(labels)} {_number(value)}")
    return "\n".join(lines) + "\n"


def _labels(labels: Labels) -> str:
    if not labels:
        return ""
    body = ",".join(f'{key}="{_escape(value)}"' for key, value in labels)
    return "{" + body + "}"


def _escape(value: str) -> str:
    return value.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n")


def _number(value: float) -> str:
    if math.isinf(value):
        return "+Inf" if value > 0 else "-Inf"
    if float(value).is_integer():
        return str(int(value))
    return repr(float(value))


# -- the writer's hash as metric families ---------------------------------------------------


def writer_families(raw: Mapping[Any, Any]) -> list[Family]:
    """Turn the contents of :data:`WRITER_STATS_KEY` into counters and histograms."""
    stats = {_text(k): _text(v) for k, v in raw.items()}
    number = _reader(stats)
    events = Family("memq_writer_events_total", "counter", "Inbox entries the writer handled")
    for outcome in ("applied", "duplicate", "rejected"):
        events.add(number(f"events_{outcome}"), outcome=outcome)
    by_type = Family("memq_writer_events_applied_total", "counter", "Applied events by type")
    for key in sorted(k for k in stats if k.startswith("type:")):
        by_type.add(number(key), type=key.removeprefix("type:"))
    return [
        Family("memq_writer_batches_total", "counter", "Committed batches").add(
            number("batches")),
        events,
        by_type,
        _histogram("memq_writer_batch_size", "Entries per committed batch", stats,
                   "size_bucket:", BATCH_SIZE_BUCKETS, number("batch_size_sum")),
        _histogram("memq_writer_apply_seconds", "Seconds to apply and commit a batch", stats,
                   "apply_bucket:", APPLY_SECONDS_BUCKETS, number("apply_seconds_sum")),
        Family("memq_writer_last_batch_lag_seconds", "gauge",
               "Seconds between sending and reading the first entry of the last batch").add(
            number("last_lag_seconds")),
    ]


def _histogram(
    name: str, help_text: str, stats: Mapping[str, str], prefix: str,
    bounds: tuple[float, ...], total: float,
) -> Family:
    family = Family(name, "histogram", help_text)
    number = _reader(stats)
    cumulative = 0.0
    for bound in bounds:
        cumulative += number(f"{prefix}{_number(bound)}")
        family.add(cumulative, "_bucket", le=_number(bound))
    cumulative += number(f"{prefix}+Inf")
    family.add(cumulative, "_bucket", le="+Inf")
    family.add(total, "_sum")
    family.add(cumulative, "_count")
    return family


def _reader(stats: Mapping[str, str]) -> Any:
    def number(key: str) -> float:
        try:
            return float(stats.get(key, 0) or 0)
        except ValueError:
            return 0.0
    return number


def _text(value: Any) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)
