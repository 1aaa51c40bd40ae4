"""``memq backfill-embeddings``: enqueue embed jobs for every message that lacks a vector.

It reads the database read-only (only the writer writes) and enqueues jobs on
``memq-embed``; the workers send the vectors back through the writer. Messages that a live
job already covers are skipped; so is everything that already has a vector from the
configured model, so running it twice enqueues nothing the second time.
"""

from __future__ import annotations

import argparse
from collections.abc import Iterator
from typing import TYPE_CHECKING, Any

from memq import broker
from memq.cli.common import add_store_options, load_config
from memq.config import Config
from memq.progress import Progress

if TYPE_CHECKING:
    import apsw


def register(sub: Any) -> None:
    parser = sub.add_parser(
        "backfill-embeddings",
        help="enqueue embed jobs for messages without a vector from the configured model",
    )
    parser.add_argument("--retry-failed", action="store_true",
                        help="also messages whose embedding failed before")
    add_store_options(parser)
    parser.set_defaults(func=backfill)


def backfill(args: argparse.Namespace) -> int:
    import apsw

    from memq.errors import StoreError
    from memq.store.connection import open_connection

    config = load_config(args)
    conn = open_connection(config.db_path, readonly=True)
    try:
        with broker.translated(config.redis_url, "enqueueing embed jobs"):
            enqueued, jobs, busy = _backfill(conn, config, args.retry_failed)
    except apsw.Error as exc:
        raise StoreError(f"cannot read messages from {config.db_path}: {exc}") from exc
    finally:
        conn.close()
    print(f"enqueued {enqueued} message(s) in {jobs} job(s) for {config.embed.model_name}; "
          f"{busy} already had a job in flight")
    return 0


def _backfill(conn: apsw.Connection, config: Config, retry_failed: bool) -> tuple[int, int, int]:
    from memq.store.dispatch import embed_jobs
    from memq.store.dispatch.embed_backlog import Snapshot, candidates, count_candidates

    model, size = config.embed.model_name, config.embed.job_batch_size
    connection = broker.client_for(config)
    snapshot = Snapshot.take(conn, connection, model)
    total = count_candidates(conn, model, snapshot.up_to_seq, include_failed=retry_failed)
    enqueued = jobs = busy = 0
    with Progress("enqueueing embed jobs", total) as progress:
        found = candidates(conn, model, snapshot.up_to_seq, include_failed=retry_failed)
        for chunk, skipped in _chunks(found, snapshot.in_flight, size):
            if chunk:
                jobs += embed_jobs.enqueue(connection, model, chunk, size)
            enqueued, busy = enqueued + len(chunk), busy + skipped
            progress.advance(len(chunk) + skipped)
    return enqueued, jobs, busy


def _chunks(
    found: Iterator[tuple[str, str]], in_flight: frozenset[str], size: int
) -> Iterator[tuple[list[tuple[str, str]], int]]:
    """Job-sized chunks of the messages not in flight, with how many were skipped."""
    chunk: list[tuple[str, str]] = []
    skipped = 0
    for message in found:
        if message[0] in in_flight:
            skipped += 1
            continue
        chunk.append(message)
        if len(chunk) == size:
            yield chunk, skipped
            chunk, skipped = [], 0
    if chunk or skipped:
        yield chunk, skipped
