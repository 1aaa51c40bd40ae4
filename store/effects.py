"""Follow-up work discovered while applying a batch, carried out only after it commits."""

from __future__ import annotations

from dataclasses import dataclass, field


@dataclass(frozen=True)
class ConsolidationRequest:
    """A consolidation pass to plan once the batch is committed."""

    event_id: str
    requested_at: str
    """The request event's ``created_at``: messages older than this minus the age are due."""
    min_age_hours: float | None
    """None: the writer's configured age."""
    session_id: str | None
    """None: every session."""


@dataclass(frozen=True)
class Erasure:
    """A committed forget: what the writer still owes outside the transaction."""

    event_id: str
    seq: int
    message_ids: tuple[str, ...]
    """The messages it erased, whose text RQ jobs may still carry."""


@dataclass
class Effects:
    """What the writer must do once the batch is durable (never before: a rolled-back
    batch must not leave jobs behind for messages that do not exist)."""

    embed: list[tuple[str, str]] = field(default_factory=list)
    """(message id, content) of new messages that need an embedding."""

    tasks_changed: set[str] = field(default_factory=set)
    """Ids of scheduled tasks whose pending run must be (re)registered or removed."""

    consolidate: list[ConsolidationRequest] = field(default_factory=list)
    """Consolidation passes requested in this batch."""

    erased: list[Erasure] = field(default_factory=list)
    """Forgets committed in this batch: the WAL and Redis still hold traces of them."""

    tombstoned: set[int] = field(default_factory=set)
    """Positions of events of this batch made tombstones in it: they changed nothing."""

    erasing: bool = False
    """A forget of this batch is erased in steps from now on
    (store/projections/erasure_steps.py): the writer has steps to run."""

    def clear(self) -> None:
        self.embed.clear()
        self.tasks_changed.clear()
        self.consolidate.clear()
        self.erased.clear()
        self.tombstoned.clear()
        self.erasing = False

    def mark(self) -> Mark:
        """Where the effects stand now, for :meth:`undo_since` when an event is rolled back."""
        return (len(self.embed), frozenset(self.tasks_changed), len(self.consolidate),
                len(self.erased), frozenset(self.tombstoned), self.erasing)

    def undo_since(self, mark: Mark) -> None:
        embed, tasks, consolidate, erased, tombstoned, erasing = mark
        del self.embed[embed:]
        self.tasks_changed.intersection_update(tasks)
        del self.consolidate[consolidate:]
        del self.erased[erased:]
        self.tombstoned.intersection_update(tombstoned)
        self.erasing = erasing


Mark = tuple[int, frozenset[str], int, int, frozenset[int], bool]
