"""The ``messages`` projection: conversation turns, their embeddings and failures."""

from __future__ import annotations

from typing import Any

import apsw
import numpy as np
import orjson

from memq.errors import InvalidEvent
from memq.events import MAX_EMBEDDING_DIM, Event, EventType
from memq.store import lexical, vectors
from memq.store.effects import Effects
from memq.store.projections.base import Applier, BatchApplier
from memq.store.projections.erasing import erased_by, tombstone
from memq.store.projections.sessions import claim as claim_owners
from memq.store.read.hidden import visible
from memq.store.write import bulk

_INSERT = """
    INSERT INTO messages (id, session_id, role, content, tool_call_id, tool_name,
        tool_calls_json, created_at, importance, embedding, embedding_model, embedding_dim,
        embedding_error, consolidated_at, seq, embedded_seq, user_id, agent_id)
    VALUES (:id, :session_id, :role, :content, :tool_call_id, :tool_name, :tool_calls_json,
        :created_at, :importance, :embedding, :embedding_model, :embedding_dim,
        :embedding_error, :consolidated_at, :seq, :embedded_seq, :user_id, :agent_id)
"""

_NEW_COLUMNS = ("id", "session_id", "role", "content", "tool_call_id", "tool_name",
                "tool_calls_json", "created_at", "importance", "seq", "user_id", "agent_id")
"""What a new message has; the other columns start NULL."""

_INSERT_NEW = f"""
    INSERT INTO messages ({", ".join(_NEW_COLUMNS)})
    SELECT {bulk.select_columns(len(_NEW_COLUMNS))} FROM json_each(?1)"""


def insert_message(
    cur: apsw.Cursor, row: dict[str, Any], effects: Effects, *, counted: bool = True
) -> None:
    """Insert one message row; a message id seen before under another event is refused.

    The row takes its session's owner (see :mod:`store.projections.sessions`); a summary
    is inserted with ``counted=False`` and does not count as a message of its session.
    """
    claim_owners(cur, [row], counted=counted)
    try:
        cur.execute(_INSERT, row)
    except apsw.ConstraintError as exc:
        raise InvalidEvent(f"message {row['id']} already exists") from exc
    lexical.index(cur, [_indexed(row)])
    if row["embedding"] is None and row["embedding_error"] is None and row["content"].strip():
        effects.embed.append((row["id"], row["content"]))


def _indexed(row: dict[str, Any]) -> lexical.Indexed:
    return row["seq"], row["session_id"], row["content"], row["user_id"], row["agent_id"]


def _base_row(event: Event, seq: int) -> dict[str, Any]:
    p = event.payload
    tool_calls = p.get("tool_calls")
    return {
        "id": p["message_id"],
        "session_id": event.session_id,
        "role": p["role"],
        "content": p["content"],
        "tool_call_id": p.get("tool_call_id"),
        "tool_name": p.get("tool_name"),
        "tool_calls_json": None if tool_calls is None else orjson.dumps(tool_calls).decode(),
        "created_at": event.created_at,
        "importance": float(p["importance"]),
        "embedding": None,
        "embedding_model": None,
        "embedding_dim": None,
        "embedding_error": None,
        "consolidated_at": None,
        "seq": seq,
        "embedded_seq": None,
        "user_id": p.get("user_id"),  # what the event asks for; claim_owners decides
        "agent_id": p.get("agent_id"),
    }


def apply_appended(cur: apsw.Cursor, event: Event, seq: int, effects: Effects) -> None:
    insert_message(cur, _base_row(event, seq), effects)


def apply_appended_many(
    cur: apsw.Cursor, numbered: list[tuple[int, Event]], effects: Effects
) -> None:
    """A run of appends with one statement; a clash raises and the writer goes careful."""
    rows = [_base_row(event, seq) for seq, event in numbered]
    claim_owners(cur, rows)
    bulk.insert(cur, _INSERT_NEW, ([r[c] for c in _NEW_COLUMNS] for r in rows))
    lexical.index(cur, [_indexed(r) for r in rows])
    effects.embed.extend((r["id"], r["content"]) for r in rows if r["content"].strip())


def apply_imported(cur: apsw.Cursor, event: Event, seq: int, effects: Effects) -> None:
    """A legacy row, carried whole: the embedding keeps its original encoding."""
    p = event.payload
    row = _base_row(event, seq)
    row["created_at"] = p["created_at"]
    if p.get("tool_calls_json") is not None:
        row["tool_calls_json"] = p["tool_calls_json"]
    if p.get("embedding_b64") is not None:
        row["embedding"] = vectors.blob_from_b64(p["embedding_b64"], p.get("embedding_dim") or 0)
    elif p.get("embedding_json") is not None:
        row["embedding"] = p["embedding_json"]
    if row["embedding"] is not None:
        row["embedding_dim"] = _legacy_dim(row["embedding"])
        row["embedding_model"] = p.get("embedding_model")
        row["embedded_seq"] = seq
    row["embedding_error"] = p.get("embedding_error")
    row["consolidated_at"] = p.get("consolidated_at")
    insert_message(cur, row, effects)


def _legacy_dim(embedding: bytes | str) -> int:
    try:
        with np.errstate(over="ignore"):  # too large for float32: caught just below
            vector = vectors.decode(embedding)
    except (ValueError, TypeError) as exc:  # JSON that is not a flat list of numbers
        raise InvalidEvent(f"message.imported: the embedding is not a list of numbers: {exc}"
                           ) from exc
    if vector.ndim != 1 or not 1 <= len(vector) <= MAX_EMBEDDING_DIM:
        raise InvalidEvent(
            f"message.imported: the embedding is not a flat list of 1-{MAX_EMBEDDING_DIM} numbers")
    if not np.isfinite(vector).all():  # 1e300 is a JSON number, but no float32
        raise InvalidEvent("message.imported: the embedding holds NaN or infinity")
    return len(vector)


def apply_embedded(cur: apsw.Cursor, event: Event, seq: int, effects: Effects) -> None:
    p = event.payload
    blob = vectors.model_vector(p["vector_b64"], p["dim"], p["model"])
    # The same model's vector twice (a retried job) changes nothing: no message is
    # embedded twice. A different model's vector replaces the old one (a re-embedding).
    cur.execute(
        f"""UPDATE messages SET embedding = ?, embedding_model = ?, embedding_dim = ?,
               embedding_error = NULL, embedded_seq = ?
           WHERE id = ? AND (embedding IS NULL OR embedding_model IS NOT ?) AND {visible()}""",
        (blob, p["model"], p["dim"], seq, p["message_id"], p["model"]),
    )
    if cur.getconnection().changes() == 0:
        _require_message(cur, p["message_id"], seq, effects)


def apply_embedding_failed(cur: apsw.Cursor, event: Event, seq: int, effects: Effects) -> None:
    p = event.payload
    # A failure reported after a success (a slow duplicate job) must not hide the vector.
    # A failure to re-embed with a new model is recorded even though the old model's
    # vector stays: otherwise the reconcile pass would retry that message forever.
    cur.execute(
        f"""UPDATE messages SET embedding_error = ?
           WHERE id = ? AND (embedding IS NULL OR embedding_model IS NOT ?) AND {visible()}""",
        (p["error"], p["message_id"], p["model"]),
    )
    if cur.getconnection().changes() == 0:
        _require_message(cur, p["message_id"], seq, effects)


def _require_message(cur: apsw.Cursor, message_id: str, seq: int, effects: Effects) -> None:
    """Refuse a result for a message that does not exist, unless it was forgotten: a
    result still in flight then is no mistake, and its vector must not stay in the log
    (nor among the rejected events), so the event becomes a tombstone. So does one for a
    message a forget is still erasing (store/projections/erasure_steps.py)."""
    if cur.execute(f"SELECT 1 FROM messages WHERE id = ? AND {visible()}",
                   (message_id,)).fetchone():
        return
    by = erased_by(cur, [message_id])
    if by is None:
        raise InvalidEvent(f"unknown message {message_id}")
    tombstone(cur, seq, by, effects)


APPLIERS: dict[str, Applier] = {
    EventType.MESSAGE_APPENDED: apply_appended,
    EventType.MESSAGE_IMPORTED: apply_imported,
    EventType.MESSAGE_EMBEDDED: apply_embedded,
    EventType.MESSAGE_EMBEDDING_FAILED: apply_embedding_failed,
}

BATCH_APPLIERS: dict[str, BatchApplier] = {
    EventType.MESSAGE_APPENDED: apply_appended_many,
}
