"""Facts: what an agent or its user knows, one value per (category, key).

``set_fact`` and ``delete_fact`` send events and return at once (``flush`` waits for
them); ``facts`` and ``fact_history`` read what is committed. A value set with
``source="user"`` is protected: an agent's (or consolidation's) change or deletion is
recorded in the log but does not touch it unless it is sent with ``force=True``.
"""

from __future__ import annotations

from typing import Any

from memq.errors import ValidationError
from memq.events import FACT_SOURCES, EventType, check_identifier
from producers.mixin import ClientBase, check_flag
from store.fact_reads import Fact, FactChange, fact_history, list_facts


class FactsMixin(ClientBase):
    def set_fact(
        self, category: str, key: str, value: str, source: str = "agent", *, force: bool = False
    ) -> str:
        """Set a fact (upsert); returns the event id. See the module for the user guard."""
        payload: dict[str, Any] = {
            "category": _name("category", category),
            "key": _name("key", key),
            "value": _value(value),
            "source": _source(source),
        }
        if check_flag("force", force):
            payload["force"] = True
        return self._send(EventType.FACT_SET, payload)

    def delete_fact(
        self, category: str, key: str, source: str = "agent", *, force: bool = False
    ) -> str:
        """Remove a fact's current value (its history stays); returns the event id."""
        payload: dict[str, Any] = {
            "category": _name("category", category),
            "key": _name("key", key),
            "source": _source(source),
        }
        if check_flag("force", force):
            payload["force"] = True
        return self._send(EventType.FACT_DELETED, payload)

    def facts(self, category: str | None = None) -> list[Fact]:
        """Committed facts, by category then key; only ``category``'s when given."""
        if category is not None:
            _name("category", category)
        with self.readers.connection() as conn:
            return list_facts(conn, category)

    def fact_history(self, category: str, key: str) -> list[FactChange]:
        """Every committed change of one fact, oldest first, with who made it and when."""
        category, key = _name("category", category), _name("key", key)
        with self.readers.connection() as conn:
            return fact_history(conn, category, key)


def _name(what: str, value: Any) -> str:
    return check_identifier(what, value)


def _value(value: Any) -> str:
    if not isinstance(value, str):
        raise ValidationError(f"value must be a string, got {type(value).__name__}")
    if not value.strip():
        raise ValidationError("value must not be empty (use delete_fact to remove a fact)")
    return value


def _source(source: Any) -> str:
    if not isinstance(source, str) or source not in FACT_SOURCES:
        raise ValidationError(
            f"source must be one of {', '.join(sorted(FACT_SOURCES))}, got {source!r:.60}"
        )
    return str(source)
