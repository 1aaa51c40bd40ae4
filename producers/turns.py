"""Conversation turns: ``append`` and ``history``, as operations both clients run.

``append`` validates, builds the event, sends it, adds the turn to working memory and
returns its message id without waiting for the writer. ``history`` lays this client's own
uncommitted turns over what is committed (read-your-writes).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from datetime import datetime
from typing import Any, NamedTuple

from memq.clock import future_problem, normalize_rfc3339, now_rfc3339, uuid7
from memq.errors import EventsRejected, ValidationError
from memq.events import Event, EventType, check_count, check_identifier
from memq.printable import shown
from memq.producers.context import ContextOps
from memq.producers.ops import AskPosition, Flush, Op, Read, Run, Send, SendMany
from memq.producers.outbox import Ticket
from memq.producers.working_memory import merge_turns
from memq.store.read import messages as stored
from memq.store.read.messages import Message, chronological_key
from memq.store.read.pool import Reader

DEFAULT_IMPORTANCE = {"user": 0.5, "assistant": 0.5, "tool": 0.3, "system": 0.1}
"""Importance of a message whose caller does not set one, by role."""


class Turn(NamedTuple):
    """One checked turn, not sent yet."""

    event: Event
    session_id: str
    created_at: str
    payload: dict[str, Any]
    user_id: str | None
    agent_id: str | None


class TurnsOps(ContextOps):
    """``append``, ``history`` and ``flush`` (``producers/ops.py``)."""

    def _append_op(
        self, session_id: str, role: str, content: str, *, importance: float | None,
        tool_call_id: str | None, tool_name: str | None, tool_calls: list[Any] | None,
        created_at: datetime | str | None, user_id: str | None, agent_id: str | None,
    ) -> Op[str]:
        turn = self._turn(session_id, role, content, importance=importance,
                          tool_call_id=tool_call_id, tool_name=tool_name,
                          tool_calls=tool_calls, created_at=created_at, user_id=user_id,
                          agent_id=agent_id)
        made = False
        try:
            made = yield from self._claim_op(turn)
            ticket = yield Send(turn.event)
        except Exception:
            self._unclaim([turn] if made else [])
            raise
        return self._remember_turn(turn, ticket)

    def _append_many_op(self, turns: Sequence[Mapping[str, Any]]) -> Op[list[str]]:
        """Every turn checked (and its owner) before any is sent; then one pipeline."""
        if not isinstance(turns, Sequence) or isinstance(turns, (str, bytes)):
            raise ValidationError(f"turns must be a list, got {type(turns).__name__}")
        built = []
        for index, turn in enumerate(turns):
            if not isinstance(turn, Mapping):
                raise ValidationError(f"turns[{index}] must be a mapping of append's arguments")
            try:
                built.append(self._turn(**turn))
            except TypeError as exc:  # an unknown or missing argument
                raise ValidationError(f"turns[{index}]: {exc}".replace("_turn()", "append()")
                                      ) from None
            except ValidationError as exc:
                raise ValidationError(f"turns[{index}]: {exc}") from None
        made: list[Turn] = []
        try:
            for checked in built:
                if (yield from self._claim_op(checked)):
                    made.append(checked)
            tickets = yield SendMany(tuple(checked.event for checked in built))
        except Exception:
            self._unclaim(made)
            raise
        return [self._remember_turn(checked, ticket)
                for checked, ticket in zip(built, tickets, strict=True)]

    def _turn(
        self, session_id: str, role: str, content: str, *, importance: float | None = None,
        tool_call_id: str | None = None, tool_name: str | None = None,
        tool_calls: list[Any] | None = None, created_at: datetime | str | None = None,
        user_id: str | None = None, agent_id: str | None = None,
    ) -> Turn:
        """A checked ``message.appended`` event, not sent yet."""
        check_identifier("session_id", session_id,
                         max_chars=self.config.limits.max_session_id_chars)
        user_id = _optional_identifier("user_id", user_id)
        agent_id = _optional_identifier("agent_id", agent_id)
        payload: dict[str, Any] = {
            "message_id": uuid7(),
            "role": role,
            "content": content,
            "importance": default_importance(role) if importance is None else importance,
            "tool_call_id": _optional_identifier("tool_call_id", tool_call_id),
            "tool_name": _optional_identifier("tool_name", tool_name),
            "tool_calls": tool_calls,
            **_owner_fields(user_id, agent_id),
        }
        when = now_rfc3339() if created_at is None else normalize_rfc3339(created_at)
        if created_at is not None and (problem := future_problem(when)) is not None:
            raise ValidationError(problem)
        event = self._event(EventType.MESSAGE_APPENDED, payload, session_id=session_id,
                            created_at=when)
        payload["importance"] = float(payload["importance"])  # an int 0 or 1 is valid too
        return Turn(event, session_id, when, payload, user_id, agent_id)

    def _claim_op(self, turn: Turn) -> Op[bool]:
        """Check the turn's owner against the session's. No read, but for an append that
        names an owner the first time this process sees the session (one primary-key
        lookup; nothing yet if there is no database). True if it made the owner known."""
        claim = (turn.session_id, turn.user_id, turn.agent_id)
        if self.owners.would_read(*claim):
            made: bool = yield Run(self.owners.claim, claim)
            return made
        return self.owners.claim(*claim)

    def _remember_turn(self, turn: Turn, ticket: Ticket) -> str:
        self._remember_appended(turn.session_id, turn.created_at, turn.payload, ticket)
        return str(turn.payload["message_id"])

    def _history_op(
        self, session_id: str, limit: int, before: str | None, after: str | None,
        summaries: bool = True,
    ) -> Op[list[Message]]:
        check_identifier("session_id", session_id,
                         max_chars=self.config.limits.max_session_id_chars)
        check_count("limit", limit, 1, 10_000)
        if before is not None and after is not None:
            raise ValidationError("give before or after, not both")
        if not isinstance(summaries, bool):
            raise ValidationError(f"summaries must be true or false, got {shown(summaries)}")
        for what, value in (("before", before), ("after", after)):
            if value is not None:
                check_identifier(what, value)
        pending = self.working_memory.pending(session_id)
        # The commit position before the database, as in WorkingMemory.sync.
        committed = (yield AskPosition()) if pending else None
        rows, anchor = yield Read(_history_rows, (session_id, limit, before, after,
                                                  summaries, bool(pending)))
        own = [p.message for p in pending if not p.ticket.settled(committed)]
        return _page(rows, own, anchor, limit, forwards=after is not None)

    def _unclaim(self, turns: Sequence[Turn]) -> None:
        """Nothing was sent: an owner these turns' claims made known would decide later
        checks (another's first turn refused). The next check reads it from the database."""
        self.owners.forget(sessions={turn.session_id for turn in turns})

    def _flush_op(self, timeout: float) -> Op[None]:
        try:
            yield Flush(timeout)
        except EventsRejected as exc:
            self._forget_rejected(exc)
            raise

    def _forget_rejected(self, exc: EventsRejected) -> None:
        """The writer will never commit these: they leave this client's reads now."""
        gone = {r.event_id for r in exc.rejections if r.event_id is not None}
        self.working_memory.drop(gone)
        self.pending_writes.drop(gone)


def _history_rows(
    conn: Reader, session_id: str, limit: int, before: str | None, after: str | None,
    summaries: bool, with_anchor: bool,
) -> tuple[list[Message], Message | None]:
    """A committed page, and the message it is anchored at when own turns need placing."""
    rows = stored.history(conn, session_id, limit, before=before, after=after,
                          summaries=summaries)
    cursor = before or after
    anchor = stored.by_ids(conn, [cursor]) if with_anchor and cursor else []
    return rows, anchor[0] if anchor else None


def _page(rows: list[Message], own: list[Message], anchor: Message | None, limit: int, *,
          forwards: bool) -> list[Message]:
    """A page of committed ``rows`` with the client's own uncommitted turns that belong in
    it: those on the page's side of ``anchor`` (all of them for the last page)."""
    if anchor is not None:
        key = chronological_key(anchor)
        own = [m for m in own if (chronological_key(m) > key) == forwards]
    merged = merge_turns(rows, own)
    return merged[:limit] if forwards else merged[-limit:]


def default_importance(role: object) -> float:
    """The importance of a turn whose caller sets none: by role, 0.5 for anything else
    (an unknown role is then refused by the schema, with its own message)."""
    return DEFAULT_IMPORTANCE.get(role, 0.5) if isinstance(role, str) else 0.5


def _owner_fields(user_id: str | None, agent_id: str | None) -> dict[str, str]:
    # Left out when not given, so an append without them is what older writers know.
    fields = {"user_id": user_id, "agent_id": agent_id}
    return {name: value for name, value in fields.items() if value is not None}


def _optional_identifier(what: str, value: Any) -> str | None:
    return None if value is None else check_identifier(what, value)
