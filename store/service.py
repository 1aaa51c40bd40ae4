"""Assembling a writer with every follow-up it owes after commit."""

from __future__ import annotations

import logging

import redis

from memq.config import Config
from memq.logs import log, redact_url
from store import embed_backlog
from store.writer import Writer

logger = logging.getLogger("memq.writer")


def open_writer(config: Config, broker: redis.Redis) -> Writer:
    """Open the writer and attach its after-commit hooks and reconcilers."""
    writer = Writer.open(config, broker)
    embed_backlog.attach(writer)
    log(logger, "writer started", db=config.db_path, redis=redact_url(config.redis_url))
    return writer
