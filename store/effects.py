"""Follow-up work discovered while applying a batch, carried out only after it commits."""

from __future__ import annotations

from dataclasses import dataclass, field


@dataclass
class Effects:
    """What the writer must do once the batch is durable (never before: a rolled-back
    batch must not leave jobs behind for messages that do not exist)."""

    embed: list[tuple[str, str]] = field(default_factory=list)
    """(message id, content) of new messages that need an embedding."""

    tasks_changed: set[str] = field(default_factory=set)
    """Ids of scheduled tasks whose pending run must be (re)registered or removed."""

    def clear(self) -> None:
        self.embed.clear()
        self.tasks_changed.clear()
