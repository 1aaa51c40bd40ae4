"""Consolidation: planning a pass, and applying a summary to the ``messages`` projection.

``consolidation.requested`` changes no rows: it records a
:class:`~store.effects.ConsolidationRequest`, and the writer's after-commit hook
(:mod:`store.consolidation_jobs`) selects the due messages and enqueues the jobs.

``session.consolidated`` inserts the summary as a new ``system`` message (embedded like
any other), lists its sources in ``summary_sources`` and sets ``consolidated_at`` on them.
Sources are never deleted. The rules, all deterministic from the event and the database:

- every source must exist and belong to the event's session, and the summary must be
  non-empty and shorter than its sources: otherwise the event is rejected (set aside
  with its reason);
- if any source is already consolidated, the event is *superseded* and changes nothing.
  That is the expected outcome of a race (a second pass enqueued an overlapping chunk
  while the first was in flight, or a job ran twice), not a bad event, so it is not
  rejected: the log keeps it, a rebuild replays it as the same no-op, and the sources
  that were not yet consolidated are picked up again by the next pass. A message is
  therefore never part of two summaries (``summary_sources`` has it as primary key).
- the summary's ``created_at`` is its earliest source's, so it sits where the stretch of
  conversation it replaces begins.
"""

from __future__ import annotations

import logging
from typing import Any, NamedTuple

import apsw
import orjson

from memq.errors import InvalidEvent, ValidationError
from memq.events import MAX_SUMMARY_SOURCES, Event, EventType, check_proposed_fact
from memq.logs import log
from memq.store.effects import ConsolidationRequest, Effects
from memq.store.projections.base import Applier
from memq.store.projections.erasing import erased_by, tombstone
from memq.store.projections.messages import insert_message

logger = logging.getLogger("memq.writer")


class _Source(NamedTuple):
    session_id: str
    content: str
    created_at: str
    consolidated_at: str | None


def apply_requested(cur: apsw.Cursor, event: Event, seq: int, effects: Effects) -> None:
    effects.consolidate.append(
        ConsolidationRequest(
            event_id=event.id,
            requested_at=event.created_at,
            min_age_hours=event.payload.get("min_age_hours"),
            session_id=event.session_id,
        )
    )


def apply_consolidated(cur: apsw.Cursor, event: Event, seq: int, effects: Effects) -> None:
    p = event.payload
    source_ids = _source_ids(p["source_ids"])
    if not p["content"].strip():
        raise InvalidEvent("session.consolidated: the summary is empty")
    proposed_facts(p)  # validates
    by = erased_by(cur, source_ids)
    expired = _expired_since(cur, source_ids, seq, str(event.session_id)) if by else {}
    if by is not None and not expired:
        # A summary of forgotten turns, still in flight when they were forgotten: it holds
        # their content, so it is tombstoned, never applied nor set aside.
        tombstone(cur, seq, by, effects)
        return
    present = [source_id for source_id in source_ids if source_id not in expired]
    sources = _sources(cur, present, str(event.session_id)) if present else []
    if any(source.consolidated_at is not None for source in sources):
        log(logger, "summary superseded: a source is already consolidated",
            summary_id=p["summary_id"], session_id=event.session_id)
        return
    chars_in = sum(len(source.content) for source in sources)
    if not expired and len(p["content"]) >= chars_in:  # (checked when first applied)
        raise InvalidEvent(
            f"session.consolidated: the summary has {len(p['content'])} characters, "
            f"not fewer than its sources' {chars_in}"
        )
    starts = [source.created_at for source in sources] + [e[0] for e in expired.values()]
    owner = next(iter(expired.values()))[1:] if expired else (None, None)
    _insert_summary(cur, event, seq, min(starts), effects, owner)
    _mark_sources(cur, event, source_ids)


def _expired_since(cur: apsw.Cursor, source_ids: list[str], seq: int, session_id: str
                   ) -> dict[str, tuple[str, str | None, str | None]]:
    """Sources erased by a retention logged after this summary: what a rebuild replays
    once their text is gone (store/projections/retention.py). id -> (created_at, user,
    agent), from ``erased_messages``; empty when the summary came after (a late one)."""
    rows = cur.execute(
        """SELECT message_id, session_id, created_at, user_id, agent_id FROM erased_messages
           WHERE message_id IN (SELECT value FROM json_each(?)) AND erased_by > ?
             AND created_at IS NOT NULL""",
        (orjson.dumps(source_ids).decode(), seq)).fetchall()
    for message_id, session, *_ in rows:
        if session != session_id:
            raise InvalidEvent(
                f"session.consolidated: message {message_id} belonged to another session")
    return {str(r[0]): (str(r[2]), _text(r[3]), _text(r[4])) for r in rows}


def _text(value: object) -> str | None:
    return None if value is None else str(value)


def proposed_facts(payload: dict[str, Any]) -> list[dict[str, str]]:
    """The facts a summary proposes (``source = "agent"``), validated.

    They are carried in the event and not applied here: a facts projection applies them
    as ``fact.set`` with ``source = "agent"``, never overwriting a fact a user set.
    """
    try:
        return [check_proposed_fact(fact) for fact in payload.get("facts") or []]
    except ValidationError as exc:
        raise InvalidEvent(f"session.consolidated: {exc}") from exc


def _source_ids(value: list[Any]) -> list[str]:
    if not value:
        raise InvalidEvent("session.consolidated: source_ids is empty")
    if len(value) > MAX_SUMMARY_SOURCES:
        raise InvalidEvent(
            f"session.consolidated: {len(value)} sources, over the {MAX_SUMMARY_SOURCES} limit"
        )
    if not all(isinstance(v, str) and v for v in value):
        raise InvalidEvent("session.consolidated: source_ids must be non-empty strings")
    if len(set(value)) != len(value):
        raise InvalidEvent("session.consolidated: source_ids lists a message twice")
    return list(value)


def _sources(cur: apsw.Cursor, source_ids: list[str], session_id: str) -> list[_Source]:
    rows = cur.execute(
        """SELECT id, session_id, content, created_at, consolidated_at FROM messages
           WHERE id IN (SELECT value FROM json_each(?))""",
        (orjson.dumps(source_ids).decode(),),
    ).fetchall()
    found = {
        str(mid): _Source(str(session), str(content), str(created), None if done is None
                          else str(done))
        for mid, session, content, created, done in rows
    }
    for source_id in source_ids:
        if source_id not in found:
            raise InvalidEvent(f"session.consolidated: unknown message {source_id}")
        if found[source_id].session_id != session_id:
            raise InvalidEvent(
                f"session.consolidated: message {source_id} belongs to another session"
            )
    return list(found.values())


def _insert_summary(
    cur: apsw.Cursor, event: Event, seq: int, created_at: str, effects: Effects,
    owner: tuple[str | None, str | None],
) -> None:
    p = event.payload
    row = {
        "id": p["summary_id"], "session_id": event.session_id, "role": "system",
        "content": p["content"], "tool_call_id": None, "tool_name": None,
        "tool_calls_json": None, "created_at": created_at,
        "importance": float(p["importance"]), "embedding": None, "embedding_model": None,
        "embedding_dim": None, "embedding_error": None, "consolidated_at": None,
        "seq": seq, "embedded_seq": None, "user_id": owner[0], "agent_id": owner[1],
    }
    # The session's owner, not counted; a rebuild whose sources were erased by retention
    # names the owner they had (the session may have no other message left to give it).
    insert_message(cur, row, effects, counted=False)


def _mark_sources(cur: apsw.Cursor, event: Event, source_ids: list[str]) -> None:
    summary_id = event.payload["summary_id"]
    cur.executemany(
        "INSERT INTO summary_sources (source_id, summary_id, position) VALUES (?, ?, ?)",
        [(source_id, summary_id, i) for i, source_id in enumerate(source_ids)],
    )
    cur.execute(
        """UPDATE messages SET consolidated_at = ?
           WHERE id IN (SELECT value FROM json_each(?))""",
        (event.created_at, orjson.dumps(source_ids).decode()),
    )


APPLIERS: dict[str, Applier] = {
    EventType.CONSOLIDATION_REQUESTED: apply_requested,
    EventType.SESSION_CONSOLIDATED: apply_consolidated,
}
