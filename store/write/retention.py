"""The writer's retention pass: once per ``[retention] interval_hours``, messages older
than ``messages_days``, recorded tool calls older than ``tool_calls_days``, the records
of forgets older than ``forgotten_days`` and the documents whose time to live ran out
(whatever the settings: a time to live is the caller's own) are erased through
``retention.applied`` events (store/projections/retention.py).

The writer makes the events itself and applies each in its own transaction
(:meth:`Writer.apply_local`), so the log says when retention ran, on which sessions and
with which cutoffs, and a rebuild replays it like any other event. The pass runs with
the writer's reconcile passes (``[writer] reconcile_interval_s``), at start and then
whenever ``interval_hours`` have gone by; it logs events only when something is due, one
per :data:`~memq.events.rules.MAX_RETENTION_SESSIONS` sessions. Its follow-up is a
forget's: the RQ jobs that carry the erased text are deleted, the WAL is truncated, the
outcome is published under ``memq:erased:<event id>``.
"""

from __future__ import annotations

import logging
import time
from datetime import timedelta
from typing import Any

from memq.clock import now_utc, to_rfc3339, uuid7
from memq.events import Event, EventType
from memq.events.rules import MAX_RETENTION_SESSIONS
from memq.logs import log
from memq.store.write.writer import Writer

logger = logging.getLogger("memq.writer")

# Sessions with a message past the cutoff that no summary stands for (summaries are kept).
_DUE_SESSIONS = """
    SELECT DISTINCT session_id FROM messages WHERE created_at < ?
      AND id NOT IN (SELECT summary_id FROM summary_sources) ORDER BY session_id"""


# Is a tool call past the cutoff still recorded? (events_by_type, then the rows)
_CALL_DUE = """
    SELECT 1 FROM events WHERE type = 'macro.observed' AND created_at < ?
      AND erased_by IS NULL LIMIT 1"""
_FORGET_DUE = """
    SELECT 1 FROM erasures WHERE created_at < ? AND kind IN ('session', 'user') LIMIT 1"""
# documents_by_expiry
_DOCUMENT_DUE = "SELECT 1 FROM documents WHERE expires_at <= ? LIMIT 1"


class RetentionPass:
    """A reconciler of the writer (``writer.reconcilers``)."""

    def __init__(self, writer: Writer) -> None:
        self.writer = writer
        self.settings = writer.config.retention
        self.next_at = 0.0
        """When the pass looks again (monotonic seconds); 0: at the first reconcile."""

    def __call__(self) -> None:
        if time.monotonic() < self.next_at:
            return
        self.next_at = time.monotonic() + self.settings.interval_hours * 3600
        for payload in self._payloads():
            event = Event(uuid7(), EventType.RETENTION_APPLIED, None, to_rfc3339(now_utc()),
                          payload)
            effects = self.writer.apply_local([event])
            for hook in self.writer.after_commit:
                hook(effects)
            log(logger, "retention applied", event_id=event.id,
                sessions=len(payload.get("sessions", ())),
                **{k: v for k, v in payload.items() if k != "sessions"})

    def _payloads(self) -> list[dict[str, Any]]:
        payloads: list[dict[str, Any]] = []
        if self.settings.messages_days > 0:
            cutoff = _days_ago(self.settings.messages_days)
            due = [str(r[0]) for r in self.writer.conn.execute(_DUE_SESSIONS, (cutoff,))]
            payloads += [{"messages_before": cutoff,
                          "sessions": due[i:i + MAX_RETENTION_SESSIONS]}
                         for i in range(0, len(due), MAX_RETENTION_SESSIONS)]
        # One event each, whatever the number of sessions: expiring calls relearns the
        # macros once, and forgets' records are found by their age alone.
        for days, key, sql in ((self.settings.tool_calls_days, "calls_before", _CALL_DUE),
                               (self.settings.forgotten_days, "forgotten_before", _FORGET_DUE)):
            if days <= 0:
                continue
            cutoff = _days_ago(days)
            if self.writer.conn.execute(sql, (cutoff,)).fetchone() is not None:
                payloads.append({key: cutoff})
        now = to_rfc3339(now_utc())
        if self.writer.conn.execute(_DOCUMENT_DUE, (now,)).fetchone() is not None:
            payloads.append({"documents_at": now})
        return payloads


def _days_ago(days: float) -> str:
    return to_rfc3339(now_utc() - timedelta(days=days))
