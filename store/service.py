"""Assembling a writer with every follow-up it owes after commit."""

from __future__ import annotations

import logging

import redis

from memq.config import Config
from memq.logs import log, redact_url
from store import embed_backlog
from store.config_tasks import sync_config_tasks
from store.consolidation_jobs import ConsolidationPlanner
from store.task_runs import TaskRuns
from store.writer import Writer

logger = logging.getLogger("memq.writer")


def open_writer(config: Config, broker: redis.Redis) -> Writer:
    """Open the writer and attach its after-commit hooks and reconcilers."""
    writer = Writer.open(config, broker)
    try:
        # Before the first reconcile, which then registers the runs of what changed.
        sync_config_tasks(writer)
    except BaseException:
        writer.close()
        raise
    task_runs = TaskRuns(writer.conn, broker)
    writer.after_commit.append(task_runs.after_commit)
    writer.reconcilers.append(task_runs.reconcile)
    writer.after_commit.append(ConsolidationPlanner(config, writer.conn, broker))
    embed_backlog.attach(writer)
    log(logger, "writer started", db=config.db_path, redis=redact_url(config.redis_url))
    return writer
