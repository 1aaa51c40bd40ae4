"""``MemoryClient``: what an agent imports to record and recall its memory.

Writes are events sent to the writer through Redis and return at once; reads go to the
SQLite file through a read-only pool. Every argument is validated before anything is
sent, so a bad call raises :class:`~memq.errors.ValidationError` and sends nothing.
"""

from __future__ import annotations

import math
import os
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import datetime
from typing import Any

import orjson

from memq import broker
from memq import config as config_module
from memq.clock import normalize_rfc3339, now_rfc3339, uuid7
from memq.config import Config
from memq.errors import ValidationError
from memq.events import ROLES, Event, EventType, check_identifier, check_payload
from producers.context import ContextMixin
from producers.facts import FactsMixin
from producers.macros import MacrosMixin
from producers.messages import MESSAGE_COLUMNS, Message, message_from_row
from producers.outbox import Outbox
from producers.prefixes import PrefixesMixin
from producers.tasks import TasksMixin
from store.reader import ReadPool

# Message and its row helpers moved to producers.messages; still importable from here.
__all__ = ["DEFAULT_IMPORTANCE", "MESSAGE_COLUMNS", "MemoryClient", "Message", "message_from_row"]

DEFAULT_IMPORTANCE = {"user": 0.5, "assistant": 0.5, "tool": 0.3, "system": 0.1}
"""Importance of a message whose caller does not set one, by role."""


class MemoryClient(ContextMixin, FactsMixin, MacrosMixin, PrefixesMixin, TasksMixin):
    """One agent process's handle on memq. Thread-safe for reads; use one per thread to write."""

    def __init__(
        self,
        redis_url: str | None = None,
        db_path: str | os.PathLike[str] | None = None,
        *,
        config: Config | None = None,
    ) -> None:
        base = config or config_module.load()
        self.config = base.replace(
            redis_url=redis_url or base.redis_url, db_path=str(db_path or base.db_path)
        )
        # One immediate retry (a pooled connection that Redis closed); the outbox does the
        # bounded, backed-off retrying of a restart.
        self.redis = broker.connect(self.config.redis_url, retries=1)
        self.outbox = Outbox(self.redis, self.config.redis_url,
                             retry_for_s=self.config.client.retry_for_s,
                             max_event_bytes=self.config.limits.max_payload_bytes)
        self.readers = ReadPool(self.config.db_path)
        self._setup_context()

    @classmethod
    def from_env(cls) -> MemoryClient:
        """Settings from ``MEMQ_CONFIG`` / ``memq.toml`` and ``MEMQ_REDIS_URL`` / ``MEMQ_DB``."""
        return cls(config=config_module.load())

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
    ) -> str:
        """Record one conversation turn; returns its message id without waiting."""
        check_identifier("session_id", session_id,
                         max_chars=self.config.limits.max_session_id_chars)
        payload = {
            "message_id": uuid7(),
            "role": _role(role),
            "content": _content(content),
            "importance": _importance(importance, role),
            "tool_call_id": _optional_text("tool_call_id", tool_call_id),
            "tool_name": _optional_text("tool_name", tool_name),
            "tool_calls": _tool_calls(tool_calls),
        }
        when = now_rfc3339() if created_at is None else normalize_rfc3339(created_at)
        # Hydrate before sending: a failed read must leave nothing sent, and the new turn
        # must not come back from the database a second time.
        self.working_memory.hydrate(session_id)
        self._send(EventType.MESSAGE_APPENDED, payload, session_id=session_id, created_at=when)
        self._remember_appended(session_id, when, payload)
        return str(payload["message_id"])

    def _send(
        self,
        etype: str,
        payload: dict[str, Any],
        *,
        session_id: str | None = None,
        created_at: str | None = None,
    ) -> str:
        """Validate with the writer's own rules, then send; returns the event id."""
        try:
            check_payload(etype, payload, self.config.limits)
        except ValidationError as exc:
            raise ValidationError(str(exc).split(": ", 1)[-1]) from None
        event = Event(id=uuid7(), type=etype, session_id=session_id,
                      created_at=created_at or now_rfc3339(), payload=payload)
        self.outbox.send(event)
        return event.id

    @contextmanager
    def batched(self) -> Iterator[MemoryClient]:
        """Pipeline many writes into few round trips (imports, bulk loads)."""
        with self.outbox.batched():
            yield self

    def flush(self, timeout: float = 10.0) -> None:
        """Return once everything this client sent is committed; else :class:`FlushTimeout`."""
        self.outbox.flush(timeout)

    # -- reading ----------------------------------------------------------------------

    def history(self, session_id: str, limit: int = 50) -> list[Message]:
        """The last ``limit`` committed messages of a session, oldest first."""
        check_identifier("session_id", session_id,
                         max_chars=self.config.limits.max_session_id_chars)
        if not isinstance(limit, int) or isinstance(limit, bool) or not 1 <= limit <= 10_000:
            raise ValidationError(f"limit must be an integer from 1 to 10000, got {limit!r}")
        with self.readers.connection() as conn:
            rows = conn.execute(
                f"""SELECT {MESSAGE_COLUMNS} FROM messages WHERE session_id = ?
                    ORDER BY created_at DESC, seq DESC LIMIT ?""",
                (session_id, limit),
            ).fetchall()
        return [message_from_row(row) for row in reversed(rows)]


def _role(role: Any) -> str:
    if not isinstance(role, str) or role not in ROLES:
        raise ValidationError(f"role must be one of {', '.join(sorted(ROLES))}, got {role!r}")
    return str(role)


def _content(content: Any) -> str:
    if not isinstance(content, str):
        raise ValidationError(f"content must be a string, got {type(content).__name__}")
    return content


def _importance(importance: Any, role: str) -> float:
    if importance is None:
        return DEFAULT_IMPORTANCE.get(role, 0.5)
    if isinstance(importance, bool) or not isinstance(importance, (int, float)):
        raise ValidationError(f"importance must be a number, got {type(importance).__name__}")
    try:
        value = float(importance)
    except OverflowError:  # an int too big for a float is out of range too
        value = math.inf
    if not math.isfinite(value) or not 0.0 <= value <= 1.0:
        raise ValidationError(f"importance must be between 0.0 and 1.0, got {importance!r:.40}")
    return value


def _optional_text(what: str, value: Any) -> str | None:
    return None if value is None else check_identifier(what, value)


def _tool_calls(tool_calls: Any) -> list[Any] | None:
    if tool_calls is None:
        return None
    if not isinstance(tool_calls, list):
        raise ValidationError(f"tool_calls must be a list, got {type(tool_calls).__name__}")
    try:
        orjson.dumps(tool_calls)
    except TypeError as exc:
        raise ValidationError(f"tool_calls must be JSON-serialisable: {exc}") from exc
    return tool_calls
