"""Every message that needs a vector gets an embed job: after commit, and by reconciling.

A message needs a vector when it has none, or one from another model than the configured
one, has no embedding error (``memq backfill-embeddings --retry-failed`` also takes those)
and is not blank: blank messages are never sent to the model.

The writer enqueues jobs for new messages right after each commit
(:meth:`EmbedBacklog.after_commit`), on its background thread. What can still leave a
message with neither a vector nor a job — a crash between commit and enqueue, Redis down
at that moment, a worker killed mid-job, a job that failed outside the model — is
repaired by the reconcile pass, run by the writer at start and every
``[writer] reconcile_interval_s``.

The pass must not re-enqueue a message whose vector is on its way: a finished job has sent
its events, but the writer may not have applied them yet. So it works from a snapshot of
(1) the log position, (2) the messages with a job in flight, (3) the last entry id of each
inbox stream. Once the writer has committed up to (3) in every stream, every job that was
not in flight at (2) has had its results applied, so a message up to position (1) that
still lacks a vector, and was not in flight at (2), has no job coming. Messages after (1)
were enqueued by the hook and belong to the next pass; so that this holds with enqueueing
on another thread, the snapshot is taken only once that thread has caught up. While the
inbox is behind (3), the snapshot waits; it is checked again after each committed batch.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from itertools import islice

import apsw
import redis

from memq.config import Config
from memq.inbox import caught_up, committed_marks, inbox_marks
from memq.logs import log
from memq.store.dispatch import embed_jobs
from memq.store.dispatch.embed_jobs import Message
from memq.store.effects import Effects
from memq.store.read.embedding_backlog import EMBEDDABLE
from memq.store.read.hidden import visible
from memq.store.write.background import Background
from memq.store.write.writer import Writer

logger = logging.getLogger("memq.writer")

PAGE_SIZE = 1000
"""Rows per query while listing candidates: each read transaction stays short."""

RECONCILE_LIMIT = 20_000
"""Messages enqueued by one reconcile pass at most, so the writer never stalls long; the
next pass takes the rest (``memq backfill-embeddings`` has no limit)."""

_EMBEDDABLE = EMBEDDABLE  # the WHERE terms of the partial index the candidates come from


# -- candidates (read-only SQL) ---------------------------------------------------------


def log_position(conn: apsw.Connection) -> int:
    row = conn.execute("SELECT coalesce(max(seq), 0) FROM events").fetchone()
    return int(row[0]) if row else 0


def candidates(
    conn: apsw.Connection, model: str, up_to_seq: int, *, include_failed: bool = False
) -> Iterator[Message]:
    """(id, content) of the messages up to ``up_to_seq`` that need a vector from ``model``."""
    yield from _pages(conn, f"embedding_model IS NULL AND {_EMBEDDABLE}", (), up_to_seq)
    for other in _embedded_models(conn):
        if other != model:
            yield from _pages(conn, f"embedding_model = ? AND {_EMBEDDABLE}", (other,), up_to_seq)
    if include_failed:
        yield from _pages(conn, "embedding_error IS NOT NULL AND embedding_model IS NOT ?",
                          (model,), up_to_seq)


def count_candidates(
    conn: apsw.Connection, model: str, up_to_seq: int, *, include_failed: bool = False
) -> int:
    """How many :func:`candidates` there are, give or take blank-looking exotic spaces."""
    where = f"(embedding_model IS NULL OR embedding_model IS NOT ?) AND {_EMBEDDABLE}"
    if include_failed:
        where = f"({where} OR (embedding_error IS NOT NULL AND embedding_model IS NOT ?))"
    params = (model, model) if include_failed else (model,)
    row = conn.execute(f"SELECT count(*) FROM messages WHERE {where} AND seq <= ?",
                       (*params, up_to_seq)).fetchone()
    return int(row[0]) if row else 0


def _pages(
    conn: apsw.Connection, where: str, params: tuple[str, ...], up_to_seq: int
) -> Iterator[Message]:
    after = 0
    while True:
        rows = conn.execute(
            f"""SELECT id, content, seq FROM messages
                WHERE {where} AND seq > ? AND seq <= ? AND {visible()}
                ORDER BY seq LIMIT {PAGE_SIZE}""",
            (*params, after, up_to_seq),
        ).fetchall()
        for mid, content, _ in rows:
            if str(content).strip():  # SQL trims ASCII spaces only; Python's rule is the rule
                yield str(mid), str(content)
        if len(rows) < PAGE_SIZE:
            return
        after = int(rows[-1][2])  # type: ignore[arg-type]  # seq is an INTEGER column


def _embedded_models(conn: apsw.Connection) -> Iterator[str]:
    """Each model that embedded some message, by index seeks (one per model)."""
    row = conn.execute(
        f"SELECT min(embedding_model) FROM messages WHERE embedding_model IS NOT NULL "
        f"AND {_EMBEDDABLE}"
    ).fetchone()
    while row and row[0] is not None:
        yield str(row[0])
        row = conn.execute(
            f"SELECT min(embedding_model) FROM messages WHERE embedding_model > ? "
            f"AND {_EMBEDDABLE}", (row[0],)
        ).fetchone()


# -- the snapshot -----------------------------------------------------------------------


def inbox_mark(connection: redis.Redis) -> dict[str, tuple[int, int]]:
    """Per inbox stream, the id of the last entry ever added to it."""
    return inbox_marks(connection)


@dataclass(frozen=True)
class Snapshot:
    up_to_seq: int
    in_flight: frozenset[str]
    inbox_mark: dict[str, tuple[int, int]]

    @classmethod
    def take(cls, conn: apsw.Connection, connection: redis.Redis, model: str) -> Snapshot:
        up_to_seq = log_position(conn)  # the order of these three reads matters: see above
        busy = frozenset(embed_jobs.in_flight(connection, model))
        return cls(up_to_seq, busy, inbox_mark(connection))

    def results_applied(self, connection: redis.Redis) -> bool:
        return caught_up(committed_marks(connection), self.inbox_mark)

    def holes(self, conn: apsw.Connection, model: str, *, include_failed: bool = False
              ) -> Iterator[Message]:
        for message in candidates(conn, model, self.up_to_seq, include_failed=include_failed):
            if message[0] not in self.in_flight:
                yield message


# -- the writer's hook and reconciler ---------------------------------------------------


class EmbedBacklog:
    """The writer's embedding follow-ups; attach with :func:`attach`."""

    def __init__(self, config: Config, conn: apsw.Connection, connection: redis.Redis,
                 background: Background) -> None:
        self.model = config.embed.model_name
        self.batch_size = config.embed.job_batch_size
        self.conn = conn
        self.redis = connection
        self.background = background
        self.pending: Snapshot | None = None
        self.last_pass = 0
        """Messages enqueued by the last reconcile pass that finished."""

    def after_commit(self, effects: Effects) -> None:
        """Enqueue jobs for the batch's new messages; finish a waiting reconcile pass."""
        if effects.embed:
            messages = list(effects.embed)
            self.background.submit(lambda: self._enqueue_new(messages))
        if self.pending is not None:
            self._guarded(self._finish)

    def _enqueue_new(self, messages: list[Message]) -> None:
        try:
            embed_jobs.enqueue(self.redis, self.model, messages, self.batch_size)
        except redis.exceptions.RedisError as exc:
            # The batch is committed; the reconcile pass will enqueue what is missing.
            log(logger, "embed jobs not enqueued", logging.WARNING,
                messages=len(messages), error=str(exc))

    def reconcile(self) -> None:
        """Start a pass, or finish a waiting one (see the module docstring)."""
        self._guarded(self._start_or_finish)

    def _start_or_finish(self) -> None:
        if self.pending is None:
            self.background.wait()  # every committed message's job is in Redis by now
            self.pending = Snapshot.take(self.conn, self.redis, self.model)
        self._finish()

    def _guarded(self, step: Callable[[], None]) -> None:
        # A failed pass is dropped, not fatal: the writer's next pass starts afresh.
        try:
            step()
        except (redis.exceptions.RedisError, apsw.Error) as exc:
            self.pending = None
            log(logger, "embedding reconcile failed", logging.WARNING, error=str(exc))

    def _finish(self) -> None:
        snapshot = self.pending
        if snapshot is None or not snapshot.results_applied(self.redis):
            return
        self.pending = None
        holes = Counted(islice(snapshot.holes(self.conn, self.model), RECONCILE_LIMIT))
        jobs = embed_jobs.enqueue(self.redis, self.model, holes, self.batch_size)
        self.last_pass = holes.count
        if holes.count:
            log(logger, "reconcile enqueued embed jobs", messages=holes.count, jobs=jobs)


class Counted(Iterator[Message]):
    """Passes messages through, counting them (the enqueuer consumes a generator)."""

    def __init__(self, messages: Iterator[Message]) -> None:
        self.messages = messages
        self.count = 0

    def __next__(self) -> Message:
        message = next(self.messages)
        self.count += 1
        return message


def attach(writer: Writer) -> EmbedBacklog:
    """Give ``writer`` its embedding hook and reconciler."""
    backlog = EmbedBacklog(writer.config, writer.conn, writer.redis, writer.background)
    writer.after_commit.append(backlog.after_commit)
    writer.reconcilers.append(backlog.reconcile)
    return backlog
