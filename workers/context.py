"""What a job function needs from its worker process: the configuration and Redis.

``memq worker`` installs the context once at start; a job function calls :func:`current`.
Explicit rather than module-level connections: tests install their own context.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable
from dataclasses import dataclass, field

import redis

from memq import acl, broker
from memq import config as config_module
from memq.authority import STREAM_OF_ROLE, Role
from memq.config import Config
from memq.events import Event, encode
from memq.inbox import send_to_inbox
from memq.logs import log

logger = logging.getLogger("memq.worker")


@dataclass
class WorkerContext:
    config: Config
    redis: redis.Redis
    retried: int = 0
    """Attempts to send that met an unreachable Redis and were tried again."""
    _role: Role | None = field(default=None, repr=False)

    @property
    def stream(self) -> str:
        """The inbox stream results go to: the one of the role Redis says this worker has
        (``memq:inbox:worker`` with memq's ACL users; admin's in one trust domain)."""
        return broker.retrying(self.config.redis_url, "asking Redis who this worker is",
                               self._stream_now, retry_for_s=self.config.client.retry_for_s,
                               on_retry=self._count_retry)

    def _stream_now(self) -> str:
        if self._role is None:
            self._role = acl.role_of(self.redis)
        return STREAM_OF_ROLE[self._role]

    def send(self, events: Iterable[Event]) -> int:
        """Send result events to the writer in one round trip; returns how many.

        Rides out a Redis restart as a client does, for ``[client] retry_for_s``: a job
        that failed here would be retried by RQ, but only after redoing all its work.
        """
        raws = [encode(event) for event in events]
        before = self.retried
        broker.retrying(self.config.redis_url, f"sending {len(raws)} result events",
                        lambda: send_to_inbox(self.redis, raws, self._stream_now()),
                        retry_for_s=self.config.client.retry_for_s,
                        on_retry=self._count_retry)
        if self.retried > before:
            log(logger, "results sent after Redis came back", logging.WARNING,
                events=len(raws), retries=self.retried - before)
        return len(raws)

    def _count_retry(self) -> None:
        self.retried += 1


_current: WorkerContext | None = None


def install(context: WorkerContext) -> None:
    global _current
    _current = context


def current() -> WorkerContext:
    """The installed context, or one built from the environment on first use."""
    global _current
    if _current is None:
        config = config_module.load()
        _current = WorkerContext(config, broker.client_for(config))
    return _current
