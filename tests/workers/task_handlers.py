"""Handlers named in ``[scheduler] handler`` by the task tests (imported by dotted path)."""

from __future__ import annotations

from typing import Any

CALLS: list[dict[str, Any]] = []


def record(delivery: dict[str, Any]) -> None:
    CALLS.append(delivery)


def explode(delivery: dict[str, Any]) -> None:
    raise RuntimeError(f"handler broke on {delivery['name']}")


NOT_CALLABLE = 42
