"""Read-your-writes for facts, tasks and terminal approvals.

Every write returns before the writer commits it. So that a client always reads its own
writes — ``pause_task`` right after ``schedule_task`` finds the task, ``facts()`` right
after ``set_fact`` shows the value — the client remembers the events of these kinds it
sent, and their reads lay them over what is committed, in the order they were sent.

An event leaves the overlay once the writer's commit position has passed its inbox entry:
committed (the database shows it from then on) or rejected (it never will). The position
is read from Redis only while something of the kind asked for is pending, and *before* the
database, so an event dropped from the overlay is always in what is read next. While
Redis cannot tell, nothing is dropped. Turns (``message.appended``) are kept by working
memory instead (``producers/working_memory.py``).

The overlays themselves are pure functions of (committed rows, pending events), beside
the mixin that reads them.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Collection

from memq.events import Event, EventType
from memq.producers.outbox import Position, Ticket

OVERLAID = frozenset({
    EventType.FACT_SET, EventType.FACT_DELETED,
    EventType.TASK_SCHEDULED, EventType.TASK_CHANGED, EventType.TASK_DELETED,
    EventType.PREFIX_ALLOWED, EventType.PREFIX_REVOKED,
})
"""Event types whose reads show this client's uncommitted writes."""

MAX_PENDING = 10_000
"""Uncommitted events remembered at most; beyond, the oldest are forgotten (only a writer
that is far behind leaves that many, and their reads then show the committed state)."""


class PendingWrites:
    """This client's sent, not yet settled events of the :data:`OVERLAID` types."""

    def __init__(self, commit_position: Callable[[], Position | None]) -> None:
        self._commit_position = commit_position
        self._sent: list[tuple[Ticket, Event]] = []
        self._lock = threading.Lock()

    def __len__(self) -> int:
        with self._lock:
            return len(self._sent)

    def track(self, ticket: Ticket, event: Event) -> None:
        """Remember a sent event, if reads of its kind are overlaid."""
        if event.type not in OVERLAID:
            return
        with self._lock:
            self._sent.append((ticket, event))
            del self._sent[: max(0, len(self._sent) - MAX_PENDING)]

    def live(self, types: Collection[str]) -> list[Event]:
        """The pending events of these types, oldest first; call it before reading the
        database (see the module docstring)."""
        return self.settle(types, self._commit_position()) if self.waiting(types) else []

    def waiting(self, types: Collection[str]) -> bool:
        """Whether any event of these types is pending (else no position need be read)."""
        with self._lock:
            return any(event.type in types for _, event in self._sent)

    def settle(self, types: Collection[str], committed: Position | None) -> list[Event]:
        """Forget the events the writer is done with at ``committed`` (read before the
        database); the rest of these types, oldest first."""
        with self._lock:
            self._sent = [(t, e) for t, e in self._sent if not t.settled(committed)]
            return [event for _, event in self._sent if event.type in types]

    def drop(self, event_ids: Collection[str]) -> None:
        """Forget events the writer rejected."""
        with self._lock:
            self._sent = [(t, e) for t, e in self._sent if e.id not in event_ids]
