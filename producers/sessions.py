"""Sessions: listing them, by user or agent, most recently active first; forgetting them.

``forget_session``, ``forget_message`` and ``forget_user`` send one event each and return
its id at once. Once the writer commits it, nothing memq keeps holds the forgotten content
(see ``store/projections/forgetting.py``); ``wait_forgotten`` returns once the writer
has also truncated its WAL and deleted the RQ jobs that carried the text, with what was
erased. Any session, or one message of it, may be forgotten by an agent; a
whole user only by the person (admin credentials).
"""

from __future__ import annotations

import time
from datetime import datetime
from typing import TYPE_CHECKING, Any

import orjson

from memq import names, tenants
from memq.clock import normalize_rfc3339
from memq.errors import FlushTimeout, NotFound, ValidationError
from memq.events import EventType, check_count, check_identifier
from memq.producers.mixin import ClientBase
from memq.producers.ops import Fetch, Flush, Op, Read, Sleep
from memq.store.read import erasures
from memq.store.read import sessions as stored
from memq.store.read.pool import Reader
from memq.store.read.sessions import SessionInfo

MAX_SESSIONS_PAGE = 10_000
"""Most sessions one call lists."""


class SessionsOps(ClientBase):
    """The sessions operations (``producers/ops.py``) both clients run."""

    if TYPE_CHECKING:

        def _drop_caches(self) -> None: ...

    def _sessions_op(
        self, user_id: str | None, agent_id: str | None, limit: int,
        before: datetime | str | None, tenant: str | None,
    ) -> Op[list[SessionInfo]]:
        for name, value in (("user_id", user_id), ("agent_id", agent_id)):
            if value is not None:
                check_identifier(name, value)
        check_count("limit", limit, 1, MAX_SESSIONS_PAGE)
        bound = None if before is None else normalize_rfc3339(before, what="before")
        if tenant is not None:
            tenants.check_name(tenant)
        found: list[SessionInfo] = yield Read(_list_sessions,
                                              (user_id, agent_id, limit, bound, tenant))
        return found

    def _forget_session_op(self, session_id: str) -> Op[str]:
        check_identifier("session_id", session_id,
                         max_chars=self.config.limits.max_session_id_chars)
        event_id = yield from self._send_op(EventType.SESSION_FORGOTTEN, {},
                                            session_id=session_id)
        self._drop_caches()
        return event_id

    def _forget_message_op(self, session_id: str, message_id: str) -> Op[str]:
        check_identifier("session_id", session_id,
                         max_chars=self.config.limits.max_session_id_chars)
        payload = {"message_id": check_identifier("message_id", message_id)}
        event_id = yield from self._send_op(EventType.MESSAGE_FORGOTTEN, payload,
                                            session_id=session_id)
        self._drop_caches()
        return event_id

    def _forget_user_op(self, user_id: str) -> Op[str]:
        event_id = yield from self._send_op(EventType.USER_FORGOTTEN,
                                            {"user_id": check_identifier("user_id", user_id)})
        self._drop_caches()
        return event_id

    def _wait_forgotten_op(self, event_id: str, timeout: float) -> Op[dict[str, Any]]:
        check_identifier("event_id", event_id)
        yield Flush(timeout)  # this client's own forget is committed from here on
        kind: str | None = yield Read(erasures.event_type, (event_id,))
        if kind is None:
            raise NotFound(f"unknown forget {event_id}: no event with that id is committed "
                           "(wait_forgotten takes the id a forget returned)")
        if kind not in FORGETS:
            raise ValidationError(f"{event_id} is a {kind} event, not a forget")
        deadline = time.monotonic() + timeout
        key = names.ERASED_PREFIX + event_id
        while True:
            raw = yield Fetch(key, "reading a forget's outcome")
            if raw is not None:
                return dict(orjson.loads(raw))
            if time.monotonic() >= deadline:
                raise FlushTimeout(f"the writer has not finished forget {event_id} within "
                                   f"{timeout:g} s (a reader may be holding an old snapshot "
                                   "of the database)")
            yield Sleep(0.02)


FORGETS = frozenset({EventType.SESSION_FORGOTTEN, EventType.MESSAGE_FORGOTTEN,
                     EventType.USER_FORGOTTEN})


def _list_sessions(conn: Reader, user_id: str | None, agent_id: str | None, limit: int,
                   before: str | None, tenant: str | None) -> list[SessionInfo]:
    return stored.list_sessions(conn, user_id=user_id, agent_id=agent_id, limit=limit,
                                before=before, tenant=tenant)

