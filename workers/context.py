"""What a job function needs from its worker process: the configuration and Redis.

``memq worker`` installs the context once at start; a job function calls :func:`current`.
Explicit rather than module-level connections: tests install their own context.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

import redis

from memq import broker, names
from memq import config as config_module
from memq.config import Config
from memq.events import Event, encode


@dataclass(frozen=True)
class WorkerContext:
    config: Config
    redis: redis.Redis

    def send(self, events: Iterable[Event]) -> int:
        """Send result events to the writer in one round trip; returns how many."""
        pipe = self.redis.pipeline(transaction=False)
        count = 0
        for event in events:
            pipe.xadd(names.INBOX_STREAM, {names.EVENT_FIELD: encode(event)})
            count += 1
        with broker.translated(self.config.redis_url, f"sending {count} result events"):
            pipe.execute()
        return count


_current: WorkerContext | None = None


def install(context: WorkerContext) -> None:
    global _current
    _current = context


def current() -> WorkerContext:
    """The installed context, or one built from the environment on first use."""
    global _current
    if _current is None:
        config = config_module.load()
        _current = WorkerContext(config, broker.connect(config.redis_url))
    return _current
