"""``MemoryClient``: what an agent imports to record and recall its memory.

Writes are events sent to the writer through Redis and return at once; reads go to the
SQLite file through a read-only pool. Every argument is validated before anything is
sent, so a bad call raises :class:`~memq.errors.ValidationError` and sends nothing.
"""

from __future__ import annotations

import copy
import os
from collections.abc import Iterator
from contextlib import contextmanager

from memq import broker
from memq.authority import Role
from memq.config import Config
from memq.errors import ValidationError
from memq.producers.changes import ChangesOps
from memq.producers.documents import DocumentsOps
from memq.producers.facts import FactsOps
from memq.producers.identity import DatabaseCheck
from memq.producers.macros import MacrosOps
from memq.producers.mixin import SyncClientBase, settings, settings_of_role
from memq.producers.outbox import Outbox
from memq.producers.owners import Owners
from memq.producers.pending import PendingWrites
from memq.producers.prefixes import PrefixesOps
from memq.producers.rejected import RejectedOps
from memq.producers.sessions import SessionsOps
from memq.producers.surface import Surface
from memq.producers.tasks import TasksOps
from memq.producers.turns import DEFAULT_IMPORTANCE, TurnsOps, default_importance
from memq.producers.webhooks import WebhooksOps
from memq.store.read.pool import ReadPool

__all__ = ["DEFAULT_IMPORTANCE", "MemoryClient", "default_importance"]


class MemoryClient(
    TurnsOps, SessionsOps, FactsOps, MacrosOps, PrefixesOps, TasksOps, DocumentsOps, WebhooksOps,
    RejectedOps, ChangesOps,
    SyncClientBase, Surface,
):
    """One agent process's handle on memq. Thread-safe for reads; use one per thread to write.

    Its methods are :class:`~memq.producers.surface.Surface`'s, run in this process."""

    def __init__(
        self,
        redis_url: str | None = None,
        db_path: str | os.PathLike[str] | None = None,
        *,
        config: Config | None = None,
    ) -> None:
        self.config = settings(redis_url, db_path, config)
        # One immediate retry (a pooled connection that Redis closed); the outbox does the
        # bounded, backed-off retrying of a restart.
        self.redis = broker.client_for(self.config, retries=1)
        self.outbox = self._new_outbox()
        self.readers = ReadPool(
            self.config.db_path, empty_until_ready=True,
            vet=DatabaseCheck(self.redis, self.config.redis_url, self.config.db_path))
        self.pending_writes = PendingWrites(self._commit_position)
        self._setup_context()

    @classmethod
    def from_env(cls, role: str = Role.AGENT) -> MemoryClient:
        """The Redis and database the ``memq`` commands use from the same directory.

        Settings come from ``MEMQ_CONFIG`` (or ``./memq.toml``), then ``MEMQ_REDIS_URL`` /
        ``MEMQ_DB``; with no Redis URL anywhere, the URL that ``memq up`` (or
        ``memq acl apply``) wrote beside the database for ``role``: ``agent.url``, or
        ``admin.url`` for the person's client (``role="admin"``). Which file is only where
        the credentials come from: what they may do is Redis' to say.
        """
        return cls(config=settings_of_role(role))

    def close(self) -> None:
        self.readers.close()
        self.redis.close()

    def __enter__(self) -> MemoryClient:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # -- sending ---------------------------------------------------------------------

    def with_own_outbox(self, sender: MemoryClient | None = None, *,
                        private: bool = False) -> MemoryClient:
        """A client that shares this one's reads (pool, caches, working memory, pending
        writes) and sends through an outbox of its own, on the same Redis credentials, or
        on ``sender``'s: its :meth:`flush` waits for what it sent and reports only its own
        rejections. Not ``private``, ``sender`` holds this client's role: the turns it
        sends settle in the shared working memory against this client's queue.
        ``private``: the client of another principal (an API key), with its own pending
        writes, working memory and knowledge of who owns a session, so that nothing
        another principal sent and the writer has not committed (or refused) is read
        through it, and its own turns settle against its own queue.

        What ``memq serve`` gives each remote client (an API key's sends on the admin's
        credentials, the only ones that may push the keys' queue). Close only the original.
        """
        if sender is not None and not isinstance(sender, MemoryClient):
            raise ValidationError(f"sender must be a MemoryClient, got {type(sender).__name__}")
        twin = copy.copy(self)
        twin.outbox = (sender or self)._new_outbox()
        if private:
            twin.pending_writes = PendingWrites(twin._commit_position)
            twin.sources = self.sources.with_own_working_memory(twin._commit_position)
            twin.working_memory = twin.sources.working_memory
            twin.owners = Owners(twin.sources.owner, max_sessions=self.owners.max_sessions)
        return twin

    def _new_outbox(self) -> Outbox:
        return Outbox(self.redis, self.config.redis_url,
                      retry_for_s=self.config.client.retry_for_s,
                      max_event_bytes=self.config.limits.max_payload_bytes,
                      wait_replicas=self.config.client.wait_replicas,
                      wait_timeout_s=self.config.client.wait_timeout_s)

    @contextmanager
    def batched(self) -> Iterator[MemoryClient]:
        """Pipeline many writes into few round trips (imports, bulk loads)."""
        with self.outbox.batched():
            yield self
