"""What a feature mixin of :class:`~producers.client.MemoryClient` may use from it.

Each feature (facts, macros, terminal approvals...) is a mixin in its own module; this
base only declares, for the type checker, the attributes and the send method that
``MemoryClient`` provides.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from memq.config import Config
from memq.errors import ValidationError
from producers.outbox import Outbox
from store.reader import ReadPool


class ClientBase:
    config: Config
    readers: ReadPool
    outbox: Outbox

    if TYPE_CHECKING:

        def _send(
            self,
            etype: str,
            payload: dict[str, Any],
            *,
            session_id: str | None = None,
            created_at: str | None = None,
        ) -> str: ...


def check_flag(what: str, value: object) -> bool:
    """A keyword that must be a real bool: a truthy string must not pass for True."""
    if not isinstance(value, bool):
        raise ValidationError(f"{what} must be True or False, got {value!r:.60}")
    return value
