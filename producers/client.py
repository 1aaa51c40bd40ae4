"""``MemoryClient``: what an agent imports to record and recall its memory.

Writes are events sent to the writer through Redis and return at once; reads go to the
SQLite file through a read-only pool. Every argument is validated before anything is
sent, so a bad call raises :class:`~memq.errors.ValidationError` and sends nothing.
"""

from __future__ import annotations

import copy
import os
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from datetime import datetime
from typing import Any

from memq import broker
from memq.authority import Role
from memq.config import Config
from memq.errors import EventsRejected
from memq.producers.context import ContextMixin
from memq.producers.documents import DocumentsMixin
from memq.producers.facts import FactsMixin
from memq.producers.identity import DatabaseCheck
from memq.producers.macros import MacrosMixin
from memq.producers.mixin import settings, settings_of_role
from memq.producers.outbox import Outbox
from memq.producers.pending import PendingWrites
from memq.producers.prefixes import PrefixesMixin
from memq.producers.sessions import SessionsMixin
from memq.producers.tasks import TasksMixin
from memq.producers.turns import DEFAULT_IMPORTANCE, TurnsOps, default_importance
from memq.store.read.messages import Message
from memq.store.read.pool import ReadPool

__all__ = ["DEFAULT_IMPORTANCE", "MemoryClient", "default_importance"]


class MemoryClient(
    TurnsOps, ContextMixin, SessionsMixin, FactsMixin, MacrosMixin, PrefixesMixin, TasksMixin,
    DocumentsMixin,
):
    """One agent process's handle on memq. Thread-safe for reads; use one per thread to write."""

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

    # -- writing ----------------------------------------------------------------------

    def append(
        self,
        session_id: str,
        role: str,
        content: str,
        *,
        importance: float | None = None,
        tool_call_id: str | None = None,
        tool_name: str | None = None,
        tool_calls: list[Any] | None = None,
        created_at: datetime | str | None = None,
        user_id: str | None = None,
        agent_id: str | None = None,
    ) -> str:
        """Record one conversation turn; returns its message id without waiting.

        ``user_id`` / ``agent_id`` say whose session it is: the first message of a
        session fixes them, later ones may leave them out, and naming anyone else raises
        :class:`ValidationError` (a session never moves to another user).
        """
        return self._run(self._append_op(
            session_id, role, content, importance=importance, tool_call_id=tool_call_id,
            tool_name=tool_name, tool_calls=tool_calls, created_at=created_at,
            user_id=user_id, agent_id=agent_id))

    def append_many(self, turns: Sequence[Mapping[str, Any]]) -> list[str]:
        """Record many turns in few round trips; returns their message ids, in order.

        Each turn is a mapping of :meth:`append`'s arguments (``session_id``, ``role``,
        ``content`` and any keyword). All are checked before any is sent: one bad turn
        raises :class:`ValidationError` naming its index, and nothing is sent.
        """
        return self._run(self._append_many_op(turns))

    def with_own_outbox(self) -> MemoryClient:
        """A client that shares this one's reads (pool, caches, working memory, pending
        writes) and sends through an outbox of its own, on the same Redis credentials:
        its :meth:`flush` waits for what it sent and reports only its own rejections.

        What ``memq serve`` gives each remote client. Close only the original.
        """
        twin = copy.copy(self)
        twin.outbox = self._new_outbox()
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

    def flush(self, timeout: float = 10.0) -> None:
        """Return once everything this client sent is committed.

        :class:`~memq.errors.EventsRejected` (with each event id and reason) if the writer
        rejected any of it; :class:`~memq.errors.FlushTimeout` if it has not committed in
        ``timeout`` seconds.
        """
        try:
            self.outbox.flush(timeout)
        except EventsRejected as exc:
            self._forget_rejected(exc)
            raise

    # -- reading ----------------------------------------------------------------------

    def history(
        self, session_id: str, limit: int = 50, *,
        before: str | None = None, after: str | None = None, summaries: bool = True,
    ) -> list[Message]:
        """A page of a session's messages, oldest first: every committed one, whoever wrote
        it, and this client's own turns not committed yet.

        Without ``before`` / ``after``: the last ``limit``. With ``before=message_id``: the
        ``limit`` messages just older than that one, so ``history(s, before=page[0].id)``
        is the previous page; with ``after=message_id``, the ``limit`` just newer (what
        came since). Raises :class:`~memq.errors.NotFound` if that message is not a
        committed message of the session.

        Consolidation adds summaries (``system`` messages, each where the stretch it
        summarises begins, beside its sources while they are kept); ``summaries=False``
        leaves them out: the turns as they were appended, as a framework's session shows
        them.
        """
        return self._run(self._history_op(session_id, limit, before, after, summaries))
