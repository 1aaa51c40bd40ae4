"""Upgrade from the legacy layout: one ``message.imported`` event per legacy row.

The legacy table is renamed ``legacy_messages`` and kept: nothing is dropped. Event ids
are derived from the row ids (UUIDv5), so an interrupted upgrade (rolled back whole) or a
repeated one cannot import a row twice.
"""

from __future__ import annotations

import base64
import uuid
from collections.abc import Callable
from contextvars import ContextVar
from typing import Any

import apsw

from memq.clock import normalize_rfc3339, now_rfc3339
from memq.config import DEFAULT_MODEL_NAME, LimitsConfig
from memq.errors import MigrationError, ValidationError
from memq.events import Event, EventType, check_payload
from store.effects import Effects
from store.projections import record_event
from store.vectors import FLOAT32_LE

ImportProgress = Callable[[int, int], None]
"""Called with (rows imported so far, rows in total)."""

import_progress: ContextVar[ImportProgress | None] = ContextVar("import_progress", default=None)
"""Set by ``memq migrate`` to draw a progress bar; migrations take only a cursor."""

PROGRESS_EVERY = 1000
"""Rows between two progress reports."""

LEGACY_NAMESPACE = uuid.UUID("5b0f3c52-9a3e-4c1e-8f1e-6d2a4f0c7b11")

# Legacy rows were written without memq's limits; do not refuse a long old message.
_IMPORT_LIMITS = LimitsConfig(max_content_bytes=1 << 30, max_payload_bytes=1 << 31)


def legacy_event_id(row_id: str) -> str:
    return str(uuid.uuid5(LEGACY_NAMESPACE, f"legacy-message:{row_id}"))


def import_legacy_messages(cur: apsw.Cursor) -> int:
    """Turn every row of ``legacy_messages`` into an event and its projection row."""
    columns = [r[1] for r in cur.execute("PRAGMA table_info(legacy_messages)")]
    rows = cur.execute(f"SELECT {', '.join(columns)} FROM legacy_messages ORDER BY rowid")
    recorded_at = now_rfc3339()
    effects = Effects()  # embed jobs for these rows come from the writer's reconcile pass
    count = 0
    values_list = rows.fetchall()
    report = import_progress.get()
    for done, values in enumerate(values_list, 1):
        event = _row_event(dict(zip(columns, values, strict=True)))
        count += record_event(cur, event, recorded_at, effects)
        if report is not None and (done % PROGRESS_EVERY == 0 or done == len(values_list)):
            report(done, len(values_list))
    return count


def _row_event(row: dict[str, Any]) -> Event:
    row_id = str(row["id"])
    payload = _payload(row)
    try:
        check_payload(EventType.MESSAGE_IMPORTED, payload, _IMPORT_LIMITS)
        created_at = normalize_rfc3339(str(row.get("created_at")))
    except ValidationError as exc:
        raise MigrationError(f"legacy message {row_id} cannot be imported: {exc}") from exc
    return Event(
        id=legacy_event_id(row_id),
        type=EventType.MESSAGE_IMPORTED,
        session_id=str(row["session_id"]),
        created_at=created_at,
        payload=payload,
    )


def _payload(row: dict[str, Any]) -> dict[str, Any]:
    embedding = row.get("embedding")
    payload: dict[str, Any] = {
        "message_id": str(row["id"]),
        "role": row["role"],
        "content": row["content"] if row["content"] is not None else "",
        "importance": 0.5 if row.get("importance") is None else float(row["importance"]),
        "tool_call_id": row.get("tool_call_id"),
        "tool_name": row.get("tool_name"),
        "tool_calls_json": row.get("tool_calls_json"),
        "created_at": str(row["created_at"]),
        "embedding_error": row.get("embedding_error"),
        "consolidated_at": row.get("consolidated_at"),
    }
    if isinstance(embedding, str):
        payload["embedding_json"] = embedding
    elif isinstance(embedding, bytes):
        payload["embedding_b64"] = base64.b64encode(embedding).decode("ascii")
        payload["embedding_dim"] = len(embedding) // FLOAT32_LE.itemsize
    if embedding is not None:
        # The legacy system embedded with the same model memq defaults to.
        payload["embedding_model"] = DEFAULT_MODEL_NAME
    return payload
