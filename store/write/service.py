"""Assembling a writer with every follow-up it owes after commit."""

from __future__ import annotations

import contextlib
import logging

import redis

from memq.broker import TRANSIENT
from memq.config import Config
from memq.logs import log, redact_url
from memq.store.dispatch import embed_backlog
from memq.store.dispatch.consolidation_jobs import ConsolidationPlanner
from memq.store.dispatch.erasure import ErasureFollowUp
from memq.store.dispatch.task_runs import TaskRuns
from memq.store.write.config_tasks import sync_config_tasks
from memq.store.write.retention import RetentionPass
from memq.store.write.writer import Writer

logger = logging.getLogger("memq.writer")


def open_writer(config: Config, broker: redis.Redis, *, rebind: bool = False) -> Writer:
    """Open the writer and attach its after-commit hooks and reconcilers.

    :class:`DatabaseMismatch` at once if the Redis keyspace belongs to another database
    (unless ``rebind``); with Redis not reachable yet, the writer claims it once it is.
    """
    writer = Writer.open(config, broker)
    writer.rebind = rebind
    try:
        _bind_if_reachable(writer)
        # Before the first reconcile, which then registers the runs of what changed.
        sync_config_tasks(writer)
    except BaseException:
        writer.close()
        raise
    task_runs = TaskRuns(writer.conn, broker)
    writer.after_commit.append(task_runs.after_commit)
    writer.reconcilers.append(task_runs.reconcile)
    writer.after_commit.append(ConsolidationPlanner(config, writer.conn, broker))
    erasure = ErasureFollowUp(writer.conn, broker, replicated=bool(config.replication.url))
    writer.after_commit.append(erasure.after_commit)
    writer.reconcilers.append(erasure.reconcile)
    embed_backlog.attach(writer)
    writer.reconcilers.append(RetentionPass(writer))
    log(logger, "writer started", db=config.db_path, redis=redact_url(config.redis_url),
        database_id=writer.claim.database_id)
    return writer


def _bind_if_reachable(writer: Writer) -> None:
    # Redis not up yet: the writer's loop waits for it, and claims it then.
    with contextlib.suppress(*TRANSIENT):
        writer.bind_database()
