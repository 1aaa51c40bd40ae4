"""After commit: turn consolidation requests into ``consolidate`` jobs on memq-consolidate.

Planning happens here rather than in the request's applier for three reasons: the
chunk bounds come from the writer's configuration (an applier sees only the event and
the database); a rebuild replays every old request and must not redo the selection; and
jobs may only be enqueued for a committed state anyway.

For each request, per session and in conversation order, the messages that are not yet
consolidated, are not summaries themselves, and are older than ``min_age_hours`` before
the request's ``created_at`` are cut into chunks of at most ``chunk_size`` messages and
``chunk_chars`` characters. A job carries its chunk's messages (workers never open the
database) and its id is derived from the chunk's message ids, so a chunk whose job is
still queued or running, or finished a moment ago, is not enqueued a second time. Any
overlap that still slips through (chunk bounds shift as more messages age) ends as a
superseded summary, which the writer ignores: see :mod:`store.projections.consolidation`.

A crash between commit and enqueue loses nothing: the next pass selects the same messages.
"""

from __future__ import annotations

import hashlib
import logging
import time
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, replace
from datetime import UTC, datetime, timedelta
from itertools import groupby, islice
from typing import Any

import apsw
import orjson
import redis
from rq import Queue
from rq.job import Job, JobStatus

from memq import broker as broker_module
from memq import jobs, names
from memq.clock import parse_rfc3339, to_rfc3339
from memq.config import Config, ConsolidationConfig
from memq.errors import BrokerError, FlushTimeout
from memq.logs import log
from memq.store.dispatch import job_liveness
from memq.store.effects import ConsolidationRequest, Effects
from memq.store.read.hidden import visible

logger = logging.getLogger("memq.writer")

JOB_FUNCTION = jobs.CONSOLIDATE

RESULT_TTL_S = 3600
"""How long a finished job keeps its chunk from being enqueued again (its summary event
may still be on its way through the inbox)."""

PLANNED_TTL_S = 3600
"""How long the outcome of a planned pass stays readable (``memq consolidate --wait``)."""


_SELECT = f"""
    SELECT m.session_id, m.id, m.role, m.content, m.created_at FROM messages AS m
    WHERE m.consolidated_at IS NULL AND m.created_at < :cutoff
      AND (:session IS NULL OR m.session_id = :session) AND {visible("m")}
      AND NOT EXISTS (SELECT 1 FROM summary_sources AS s WHERE s.summary_id = m.id)
    ORDER BY m.session_id, m.created_at, m.seq
"""


@dataclass(frozen=True)
class Chunk:
    session_id: str
    messages: tuple[dict[str, str], ...]
    """Each ``{"id", "role", "content", "created_at"}``, oldest first."""
    user_id: str | None = None
    """The session's user: the facts a summary proposes are that user's."""

    @property
    def chars(self) -> int:
        return sum(len(m["content"]) for m in self.messages)

    @property
    def job_id(self) -> str:
        digest = hashlib.sha256(self.session_id.encode())
        for message in self.messages:
            digest.update(b"\x00" + message["id"].encode())
        return f"memq-consolidate-{digest.hexdigest()[:40]}"


def cutoff(request: ConsolidationRequest, default_hours: float) -> str:
    """Messages created before this moment are old enough for ``request``."""
    hours = default_hours if request.min_age_hours is None else request.min_age_hours
    try:
        return to_rfc3339(parse_rfc3339(request.requested_at) - timedelta(hours=hours))
    except OverflowError:  # a request dated near year 1: nothing can be that old
        return to_rfc3339(datetime.min.replace(tzinfo=UTC))


def select_chunks(
    conn: apsw.Connection, request: ConsolidationRequest, limits: ConsolidationConfig
) -> list[Chunk]:
    """The chunks due for ``request``, at most ``max_chunks_per_pass`` of them."""
    cur = conn.cursor()
    try:
        rows = cur.execute(_SELECT, {"cutoff": cutoff(request, limits.min_age_hours),
                                     "session": request.session_id})
        chunks = list(islice(chunk_rows(rows, limits), limits.max_chunks_per_pass))
    finally:
        cur.close()  # ends the read transaction even when the pass stopped early
    return _with_users(conn, chunks)


def _with_users(conn: apsw.Connection, chunks: list[Chunk]) -> list[Chunk]:
    sessions = orjson.dumps(sorted({c.session_id for c in chunks})).decode()
    users = {str(session): str(user) for session, user in conn.execute(
        """SELECT session_id, user_id FROM sessions
           WHERE session_id IN (SELECT value FROM json_each(?)) AND user_id IS NOT NULL""",
        (sessions,))}
    return [replace(c, user_id=users.get(c.session_id)) for c in chunks]


def chunk_rows(rows: Iterable[Any], limits: ConsolidationConfig) -> Iterator[Chunk]:
    """Cut ``(session_id, id, role, content, created_at)`` rows, ordered by session and
    time, into bounded chunks; a chunk under ``min_chunk_chars`` waits for a later pass."""
    for session_id, group in groupby(rows, key=lambda row: row[0]):
        current: list[dict[str, str]] = []
        chars = 0
        for _, mid, role, content, created_at in group:
            full = len(current) >= limits.chunk_size or chars + len(content) > limits.chunk_chars
            if current and full:
                if chars >= limits.min_chunk_chars:
                    yield Chunk(session_id, tuple(current))
                current, chars = [], 0
            current.append({"id": mid, "role": role, "content": content,
                            "created_at": created_at})
            chars += len(content)
        if current and chars >= limits.min_chunk_chars:
            yield Chunk(session_id, tuple(current))


def enqueue(connection: redis.Redis, config: Config, chunks: list[Chunk]) -> int:
    """Enqueue a job per chunk unless one with its id is still busy; returns how many."""
    if not chunks:
        return 0
    existing = jobs.fetch_many([c.job_id for c in chunks], connection)
    data = []
    for chunk, job in zip(chunks, existing, strict=True):
        if job is not None:
            if _busy(connection, job):
                continue
            job.delete()  # a failed or stopped attempt: this one replaces it
        data.append(_job_data(chunk, config))
    if data:
        # Enqueued as data only (JSON, by dotted path): the store never imports job code.
        jobs.queue(names.QUEUE_CONSOLIDATE, connection).enqueue_many(data)
    return len(data)


def _busy(connection: redis.Redis, job: Job) -> bool:
    """Waiting, running in a live worker, or finished lately: a new job would repeat it.

    A job whose worker died (SIGKILL, a lost host) is not busy: RQ would only notice after
    its timeout, and the chunk would wait that long for nothing (``store/job_liveness.py``).
    """
    if job.get_status(refresh=False) == JobStatus.FINISHED:
        return True
    return job_liveness.in_flight(connection, job.id)


def _job_data(chunk: Chunk, config: Config) -> Any:
    kwargs: dict[str, Any] = {"session_id": chunk.session_id, "messages": list(chunk.messages)}
    if chunk.user_id is not None:
        kwargs["user_id"] = chunk.user_id
    return Queue.prepare_data(
        JOB_FUNCTION,
        kwargs=kwargs,
        job_id=chunk.job_id,
        # What forgetting looks for: the job carries these messages' text.
        meta={"session_id": chunk.session_id, "message_ids": [m["id"] for m in chunk.messages]},
        timeout=config.consolidation.job_timeout_s,
        result_ttl=RESULT_TTL_S,
        description=f"consolidate {len(chunk.messages)} messages of {chunk.session_id}",
    )


class ConsolidationPlanner:
    """The writer's after-commit hook that plans the requested passes."""

    def __init__(self, config: Config, conn: apsw.Connection, connection: redis.Redis) -> None:
        self.config = config
        self.conn = conn
        self.redis = connection

    def __call__(self, effects: Effects) -> None:
        for request in effects.consolidate:
            self.plan(request)

    def plan(self, request: ConsolidationRequest) -> int:
        """Select and enqueue one pass; failures are logged, the next pass retries."""
        try:
            chunks = select_chunks(self.conn, request, self.config.consolidation)
            with broker_module.translated(self.config.redis_url, "enqueueing consolidation"):
                count = enqueue(self.redis, self.config, chunks)
                self._report(request, {"chunks": len(chunks), "enqueued": count})
        except (BrokerError, apsw.Error) as exc:
            log(logger, "consolidation jobs not enqueued; the next pass retries",
                logging.WARNING, error=str(exc))
            return 0
        log(logger, "consolidation pass planned", session_id=request.session_id,
            chunks=len(chunks), enqueued=count,
            messages=sum(len(c.messages) for c in chunks))
        return count

    def _report(self, request: ConsolidationRequest, outcome: dict[str, int]) -> None:
        key = names.CONSOLIDATION_PLANNED_PREFIX + request.event_id
        self.redis.set(key, orjson.dumps(outcome), ex=PLANNED_TTL_S)


def planned(connection: redis.Redis, event_id: str) -> dict[str, int] | None:
    """What the writer planned for the request ``event_id``; None until it has."""
    raw = connection.get(names.CONSOLIDATION_PLANNED_PREFIX + event_id)
    return None if raw is None else dict(orjson.loads(raw))


def wait_planned(connection: redis.Redis, event_id: str, timeout: float) -> dict[str, int]:
    """Wait until the writer has planned the request ``event_id``; else :class:`FlushTimeout`."""
    deadline = time.monotonic() + timeout
    while (outcome := planned(connection, event_id)) is None:
        if time.monotonic() >= deadline:
            raise FlushTimeout(
                f"the writer has not planned consolidation request {event_id} within "
                f"{timeout:g} s; is `memq writer` running?"
            )
        time.sleep(0.02)
    return outcome
