"""A sustained, mixed load for fault tests, and the check that nothing it sent was lost.

The load is what real users send: appends and fact changes through ``MemoryClient``, and
``message.embedded`` events with real-shaped 384-dimension unit vectors sent through the
inbox exactly as an embed worker sends them (``WorkerContext.send``). Everything is
recorded only once it is acknowledged: an append or fact change when the pipelined send
returned, an embedding when the worker's pipeline returned.
"""

from __future__ import annotations

import hashlib
import random
import threading
from dataclasses import dataclass, field

import apsw
import numpy as np
import redis

from memq import MemoryClient
from memq.clock import now_rfc3339, uuid7
from memq.config import Config
from memq.errors import BrokerError
from memq.events import Event, EventType
from memq.store import rebuild, vectors
from memq.workers.context import WorkerContext

WORDS = ("the", "deploy", "failed", "because", "redis", "was", "restarted", "while", "we",
         "booked", "a", "table", "for", "friday", "at", "eight", "remember", "my", "sister")


def vector_for(message_id: str, dim: int = 384) -> np.ndarray:
    """A deterministic unit vector per message: a retried job computes the same one."""
    seed = int.from_bytes(hashlib.sha256(message_id.encode()).digest()[:8], "little")
    vec = np.random.default_rng(seed).standard_normal(dim).astype(np.float32)
    return vec / np.linalg.norm(vec)


@dataclass
class Sent:
    """What the writer acknowledged receiving (through Redis), to be found committed."""

    appends: dict[str, str] = field(default_factory=dict)
    """message id -> content"""
    facts: dict[tuple[str, str], str | None] = field(default_factory=dict)
    """(category, key) -> the value last set, None once deleted"""
    fact_sets: int = 0
    fact_deletes: int = 0
    embedded: set[str] = field(default_factory=set)
    embed_events: int = 0
    broker_errors: list[str] = field(default_factory=list)

    @property
    def events(self) -> int:
        return len(self.appends) + self.fact_sets + self.fact_deletes + self.embed_events


class Load(threading.Thread):
    """Sends rounds of appends, fact changes and embeddings until stopped."""

    def __init__(self, config: Config, seed: int, *, pause_s: float = 0.02,
                 appends_per_round: int = 40) -> None:
        super().__init__(name="fault-load", daemon=True)
        self.config = config
        self.rng = random.Random(seed)
        self.pause_s = pause_s
        self.appends_per_round = appends_per_round
        self.sent = Sent()
        self.ids: list[str] = []
        self.stop = threading.Event()
        self.client = MemoryClient(config=config)
        self.worker = WorkerContext(config, redis.Redis.from_url(config.redis_url))
        self.failure: BaseException | None = None
        _running.append(self)

    def run(self) -> None:
        try:
            while not self.stop.is_set():
                try:
                    self.round()
                except BrokerError as exc:  # counted: a test decides whether any is allowed
                    self.sent.broker_errors.append(str(exc))
                self.stop.wait(self.pause_s)
        except BaseException as exc:  # surfaced by finish(); a thread cannot fail a test
            self.failure = exc

    def round(self) -> None:
        appended: dict[str, str] = {}
        facts: list[tuple[tuple[str, str], str | None]] = []
        with self.client.batched():
            for _ in range(self.appends_per_round):
                content = self.text()
                mid = self.client.append(f"s{self.rng.randrange(8)}", "user", content)
                appended[mid] = content
            for _ in range(self.rng.randrange(6)):
                facts.append(self.fact_change())
        # Only now, the pipeline having returned, are they acknowledged.
        self.sent.appends.update(appended)
        self.ids.extend(appended)
        for key, value in facts:
            self.sent.facts[key] = value
            self.sent.fact_sets += value is not None
            self.sent.fact_deletes += value is None
        self.embed_some()

    def text(self) -> str:
        return " ".join(self.rng.choice(WORDS) for _ in range(self.rng.randrange(3, 60)))

    def fact_change(self) -> tuple[tuple[str, str], str | None]:
        key = (f"cat{self.rng.randrange(3)}", f"key{self.rng.randrange(20)}")
        if self.sent.facts.get(key) is not None and self.rng.random() < 0.3:
            self.client.delete_fact(*key)
            return key, None
        value = f"value {self.rng.randrange(10**6)}"
        self.client.set_fact(*key, value)
        return key, value

    def embed_some(self) -> None:
        """Embed some acknowledged messages, a few again (a retried job), as a worker does."""
        chosen = self.rng.sample(self.ids, min(len(self.ids), 12))
        events = [embedded_event(self.config, mid) for mid in chosen]
        self.worker.send(events)
        self.sent.embedded.update(chosen)
        self.sent.embed_events += len(events)

    def finish(self) -> Sent:
        self.stop.set()
        self.join(60)
        if self.failure is not None:
            raise self.failure
        return self.sent


_running: list[Load] = []


def stop_leftovers() -> None:
    """Stop every load a test started and left sending (it failed half-way): left running,
    it would go on appending into the next tests' Redis, which then find turns, facts and
    rejections they never sent."""
    while _running:
        load = _running.pop()
        load.stop.set()
        load.join(60)
        load.client.close()


def embedded_event(config: Config, message_id: str) -> Event:
    vec = vector_for(message_id, config.embed.dim)
    return Event(id=uuid7(), type=EventType.MESSAGE_EMBEDDED, session_id=None,
                 created_at=now_rfc3339(),
                 payload={"message_id": message_id, "model": config.embed.model_name,
                          "dim": config.embed.dim, "vector_b64": vectors.to_b64(vec)})


@dataclass
class Verdict:
    lost: list[str]
    duplicated: int
    problems: list[str]


def verify(config: Config, sent: Sent) -> Verdict:
    """Compare the database with what was acknowledged; every difference is a problem."""
    conn = apsw.Connection(config.db_path, flags=apsw.SQLITE_OPEN_READONLY)
    try:
        return _verify(conn, config, sent)
    finally:
        conn.close()


def _verify(conn: apsw.Connection, config: Config, sent: Sent) -> Verdict:
    problems: list[str] = []
    stored = dict(conn.execute("SELECT id, content FROM messages").fetchall())
    lost = [mid for mid in sent.appends if mid not in stored]
    changed = [mid for mid, text in sent.appends.items() if mid in stored and stored[mid] != text]
    if changed:
        problems.append(f"{len(changed)} messages differ from what was sent, e.g. {changed[0]}")
    by_type = dict(conn.execute("SELECT type, count(*) FROM events GROUP BY type").fetchall())
    expected = {"message.appended": len(sent.appends), "fact.set": sent.fact_sets,
                "fact.deleted": sent.fact_deletes, "message.embedded": sent.embed_events}
    duplicated = 0
    for etype, count in expected.items():
        found = by_type.get(etype, 0)
        duplicated += max(0, found - count)
        if found != count:
            problems.append(f"{found} {etype} events in the log, {count} acknowledged")
    problems += _check_facts(conn, sent) + _check_vectors(conn, config, sent)
    rejected = conn.execute("SELECT count(*) FROM rejected_events").fetchone()[0]
    if rejected:
        problems.append(f"{rejected} events were set aside")
    if conn.execute("PRAGMA integrity_check").fetchone()[0] != "ok":
        problems.append("PRAGMA integrity_check failed")
    problems += rebuild.check(config.db_path)
    return Verdict(lost, duplicated, problems)


def _check_facts(conn: apsw.Connection, sent: Sent) -> list[str]:
    stored = {(c, k): v for c, k, v in conn.execute("SELECT category, key, value FROM facts")}
    wanted = {key: value for key, value in sent.facts.items() if value is not None}
    if stored != wanted:
        diff = set(stored.items()) ^ set(wanted.items())
        return [f"facts differ from the last acknowledged changes: {sorted(diff)[:3]}"]
    return []


def _check_vectors(conn: apsw.Connection, config: Config, sent: Sent) -> list[str]:
    rows = conn.execute(
        "SELECT id, embedding, embedding_model FROM messages WHERE embedding IS NOT NULL")
    stored = {mid: (bytes(blob), model) for mid, blob, model in rows}
    problems = []
    if set(stored) != sent.embedded:
        problems.append(f"{len(stored)} messages embedded, {len(sent.embedded)} acknowledged")
    wrong = [mid for mid, (blob, model) in stored.items()
             if model != config.embed.model_name
             or blob != vector_for(mid, config.embed.dim).astype("<f4").tobytes()]
    if wrong:
        problems.append(f"{len(wrong)} stored vectors differ from the ones sent")
    return problems
