"""Forgetting: ``session.forgotten``, ``user.forgotten`` and ``message.forgotten`` erase
every trace of their data.

Once the event is committed, nothing memq keeps holds the forgotten content. In the same
transaction, set-based (one statement per table, whatever the number of messages):

- the sessions' messages are deleted: their text, vectors and summaries, their rows in
  ``summary_sources``, and their words in the lexical index (``store.lexical.unindex``:
  in place for a few, by rewriting the index for many);
- every event of those sessions logged before this one, and every embedding event of
  their messages, becomes a *tombstone*: its row stays (position, id, type, session,
  time), so the log keeps its order and a redelivered event is still a duplicate, but
  its payload becomes ``{}`` and ``erased_by`` names the erasing event. A rebuild skips
  tombstones, and the live projections equal what it gives;
- for a user, also their facts and documents, and the tombstones of their fact and
  document events, and of their tool calls in sessions that lost them as owner since (a
  retention or a message forget emptied them: ``erased_messages`` says whose they were);
- the sessions' rows (a forgotten session keeps only its mark, so that other processes
  see that it changed), their macro chains, the rejected events that name them, and the
  legacy rows they were imported from; learned macros are recomputed from the log when
  forgotten tool calls had taught them anything;
- ``erased_messages`` keeps the ids (never the text) of what went, so that a late result
  for one of them (an embedding, a summary still in flight) is tombstoned on arrival
  rather than applied or set aside with its content; ``erasures`` records the erasure.

The writer's connection keeps ``secure_delete`` on (``store.connection``), so freed
space in the file holds zeros. After commit the writer truncates the WAL and deletes the
RQ jobs that carry the forgotten text (``store.dispatch.erasure``).

**One message** (``message.forgotten``): the same, for the message and, when a summary
was built from it (or it is a summary), that summary: it holds the message's content.
Only a message of the event's session is erased; any other id is a no-op, still recorded.
Their events become tombstones: the message's ``message.appended`` (or import), the
summary's ``session.consolidated``, their embedding results, and every other summary
event of the session that names the message. The summary's other sources are no longer
consolidated (a later pass may summarise them again), so a summary event that was
superseded only because one of them was already consolidated would apply on a rebuild:
those events, no-ops, become tombstones too. The session keeps its other messages; its
times are taken again from them, its count goes down (``sessions.subtract``) and its mark
moves.
``erased_messages`` also keeps the message's position and owner, for a rebuild of the
turns that followed it (store/projections/sessions.py).

Kept on purpose: the erasing event itself, which names the session or the user (and the
message's id), the ids of the forgotten messages and the tombstones' envelopes. No
content.
"""

from __future__ import annotations

from dataclasses import dataclass

import apsw

from memq.errors import InvalidEvent
from memq.events import Event, EventType, check_identifier
from memq.store.effects import Effects, Erasure
from memq.store.projections.base import Applier
from memq.store.projections.erasing import (
    TOMBSTONE,
    TOMBSTONE_SEQS,
    Doomed,
    erase,
    json_list,
    relearn_macros,
)
from memq.store.projections.erasure_steps import deferred, drain, hides_user
from memq.store.projections.fact_versions import forget_user as forget_versions
from memq.store.projections.sessions import subtract
from memq.store.read.hidden import visible

_EACH = "(SELECT value FROM json_each(?))"

# The expression and WHERE terms of the index events_fact_history.
_TOMBSTONE_FACTS = f"""
    UPDATE events SET payload = '{TOMBSTONE}', erased_by = :by
    WHERE json_extract(payload, '$.user_id') = :user
      AND type IN ('fact.set', 'fact.deleted') AND erased_by IS NULL AND seq < :by"""
# ... and of the index events_document_key (its first expression).
_TOMBSTONE_DOCUMENTS = f"""
    UPDATE events SET payload = '{TOMBSTONE}', erased_by = :by
    WHERE json_extract(payload, '$.user_id') = :user
      AND type IN ('document.put', 'document.deleted', 'document.touched')
      AND erased_by IS NULL AND seq < :by"""
# The user's tool calls in sessions that are no longer theirs: a retention or a message
# forget emptied them (they lost their owner), and erased_messages says the user's turns
# were there when each call was logged (what the macros learned as the user's: sessions.
# user_at). Seeks: erased_messages_by_user, then events_by_session over each turn's life.
_TOMBSTONE_CALLS_LEFT = f"""
    UPDATE events SET payload = '{TOMBSTONE}', erased_by = :by
    WHERE seq IN (
        SELECT c.seq FROM erased_messages AS e
        JOIN events AS c ON c.session_id = e.session_id AND c.seq > e.seq
            AND c.seq < min(e.erased_by, :by)
        WHERE e.user_id = :user AND c.type = 'macro.observed' AND c.erased_by IS NULL)
    RETURNING seq"""
# Both: only the events logged before the forget. A fact or document set after it (later
# in the same batch, or in a later one) is the user's new data, and stays.
# By session and type first (events_by_session), then each summary event's sources. Only
# those logged before: a later one in the same batch is still to be applied (a summary of
# the freed sources is new, one of the message a late result, tombstoned on arrival).
_TOMBSTONE_SUMMARIES = f"""
    UPDATE events SET payload = '{TOMBSTONE}', erased_by = :by
    WHERE session_id = :session AND type = 'session.consolidated' AND erased_by IS NULL
      AND seq < :by
      AND EXISTS (SELECT 1 FROM json_each(events.payload, '$.source_ids') AS s
                  WHERE s.value = :message OR (events.seq > :after
                      AND s.value IN (SELECT value FROM json_each(:freed))))
    RETURNING seq"""
_KEEP_POSITIONS = f"""
    INSERT OR IGNORE INTO erased_messages (message_id, erased_by, session_id, user_id,
        agent_id, seq)
    SELECT id, ?, session_id, user_id, agent_id, seq FROM messages WHERE id IN {_EACH}"""
# The user's sessions; on a rebuild, also the empty ones without an owner whose messages
# this forget erased. A rebuild no longer sees those messages, so a retention that named
# their session before (it moves the marks of the sessions it names) left it an ownerless
# mark; live, the session was the user's and goes.
_DELETE_SESSIONS = """
    DELETE FROM sessions WHERE user_id = :user OR (
        user_id IS NULL AND last_active_at IS NULL
        AND session_id IN (SELECT session_id FROM erased_messages WHERE erased_by = :by))"""


def apply_session_forgotten(cur: apsw.Cursor, event: Event, seq: int, effects: Effects) -> None:
    session = str(event.session_id)
    row = cur.execute("SELECT user_id FROM sessions WHERE session_id = ?", (session,)).fetchone()
    if deferred(cur, [session], seq, effects):
        doomed, counts = None, (0, 0)
    else:
        doomed = _messages(cur, "session_id = ?", session)
        counts = erase(cur, [session], doomed, seq, effects)
    # The session keeps only its mark (moved to this event once the applier returns), so
    # every process sees that it changed; its owner, times and counts go.
    cur.execute("DELETE FROM sessions WHERE session_id = ?", (session,))
    _record(cur, event, seq, ("session", session, None if row is None else row[0]), counts)
    if doomed is not None:  # else once its last step is done (erasure_steps.py)
        effects.erased.append(Erasure(event.id, seq, tuple(doomed.ids)))


def apply_user_forgotten(cur: apsw.Cursor, event: Event, seq: int, effects: Effects) -> None:
    user = check_identifier("user_id", event.payload["user_id"], error=InvalidEvent)
    if hides_user(cur, user):  # a retry while the first still erases: it finishes first
        drain(cur, effects, applied=seq - 1)
    sessions = [str(r[0]) for r in cur.execute(
        "SELECT session_id FROM sessions WHERE user_id = ?", (user,))]
    if deferred(cur, sessions, seq, effects, user):
        doomed, (messages, events) = None, (0, 0)
    else:
        doomed = _messages(cur, "user_id = ?", user)
        messages, events = erase(cur, sessions, doomed, seq, effects, user)
    events += _forget_calls_left(cur, user, seq, effects)
    cur.execute("DELETE FROM facts WHERE user_id = ?", (user,))
    forget_versions(cur, user)
    cur.execute(_TOMBSTONE_FACTS, {"by": seq, "user": user})
    events += cur.getconnection().changes()
    cur.execute("DELETE FROM documents WHERE user_id = ?", (user,))
    cur.execute(_TOMBSTONE_DOCUMENTS, {"by": seq, "user": user})
    events += cur.getconnection().changes()
    # No mark is left: the rows go, and a process holding one of these sessions sees its
    # mark gone, which is a change too.
    cur.execute(_DELETE_SESSIONS, {"user": user, "by": seq})
    _record(cur, event, seq, ("user", None, user), (messages, events))
    if doomed is not None:  # else once its last step is done (erasure_steps.py)
        effects.erased.append(Erasure(event.id, seq, tuple(doomed.ids)))


def _forget_calls_left(cur: apsw.Cursor, user: str, seq: int, effects: Effects) -> int:
    """Tombstone the user's calls in sessions they no longer own, and learn the macros
    again without them; returns the events erased."""
    gone = [int(r[0]) for r in cur.execute(_TOMBSTONE_CALLS_LEFT, {"by": seq, "user": user})]
    if not gone:
        return 0
    effects.tombstoned.update(gone)
    return len(gone) + relearn_macros(cur, seq)


def apply_message_forgotten(cur: apsw.Cursor, event: Event, seq: int, effects: Effects
                            ) -> None:
    session, message = str(event.session_id), str(event.payload["message_id"])
    owner = cur.execute("SELECT user_id FROM sessions WHERE session_id = ?", (session,)).get
    if _hidden(cur, session, message):
        drain(cur, effects, applied=seq - 1)  # its session's forget, under way, first
    target = _target(cur, session, message)
    counts = (0, 0) if target is None else _erase_message(cur, session, target, seq, effects)
    # Live and on a rebuild alike (which no longer sees the message): the times from what
    # is left; one counted message fewer unless it was a summary (summaries do not count).
    subtract(cur, session, int(target is not None and target.summary != message))
    _record(cur, event, seq, ("message", session, owner), counts)
    effects.erased.append(Erasure(event.id, seq, () if target is None else target.ids))


@dataclass(frozen=True)
class _Target:
    """What forgetting one message reaches: the message, and the summary that holds its
    content (the message itself, when it is a summary), if there is one."""

    message: str
    summary: str | None
    summary_seq: int
    """The position of the summary's ``session.consolidated`` (0: no summary)."""
    freed: list[str]
    """The summary's other sources."""

    @property
    def ids(self) -> tuple[str, ...]:
        return tuple(dict.fromkeys(m for m in (self.message, self.summary) if m is not None))


def _target(cur: apsw.Cursor, session: str, message: str) -> _Target | None:
    """The message and its summary; None unless the message is one of ``session``'s (and
    not one a forget is erasing already: store/projections/erasure_steps.py)."""
    if cur.execute(f"SELECT 1 FROM messages WHERE id = ? AND session_id = ? AND {visible()}",
                   (message, session)).get is None:
        return None
    summary = cur.execute("SELECT summary_id FROM summary_sources WHERE source_id = ?",
                          (message,)).get
    if summary is None and cur.execute(
            "SELECT 1 FROM summary_sources WHERE summary_id = ? LIMIT 1", (message,)).get:
        summary = message
    if summary is None:
        return _Target(message, None, 0, [])
    summary_seq = cur.execute("SELECT seq FROM messages WHERE id = ?", (summary,)).get
    freed = [str(r[0]) for r in cur.execute(
        "SELECT source_id FROM summary_sources WHERE summary_id = ? AND source_id != ?",
        (summary, message))]
    return _Target(message, str(summary), int(summary_seq or 0), freed)


def _hidden(cur: apsw.Cursor, session: str, message: str) -> bool:
    """Whether the message is one of ``session``'s that a forget under way hides."""
    return cur.execute(f"SELECT 1 FROM messages WHERE id = ? AND session_id = ? "
                       f"AND NOT {visible()}", (message, session)).get is not None


def _erase_message(cur: apsw.Cursor, session: str, target: _Target, seq: int,
                   effects: Effects) -> tuple[int, int]:
    """Erase the message and its summary; returns (messages, events) erased."""
    ids = json_list(list(target.ids))
    doomed = _messages(cur, f"id IN {_EACH}", ids)
    # With position and owner (for a rebuild: store/projections/sessions.py); _erase's
    # plain rows for the same ids are then ignored.
    cur.execute(_KEEP_POSITIONS, (seq, ids))
    events = _tombstone_origins(cur, session, target, doomed.seqs, seq, effects)
    messages, results = erase(cur, [], doomed, seq, effects)
    cur.execute(f"UPDATE messages SET consolidated_at = NULL WHERE id IN {_EACH}",
                (json_list(target.freed),))
    return messages, events + results


def _tombstone_origins(cur: apsw.Cursor, session: str, target: _Target, seqs: list[int],
                       seq: int, effects: Effects) -> int:
    """Empty the events that made the rows (by their positions) and the summary events
    that name the message, or, after the summary, one of its freed sources (see the
    docstring); returns how many."""
    summaries = {"by": seq, "session": session, "message": target.message,
                 "freed": json_list(target.freed), "after": target.summary_seq}
    gone = [int(r[0]) for r in cur.execute(_TOMBSTONE_SUMMARIES, summaries)]
    gone += [int(r[0]) for r in cur.execute(TOMBSTONE_SEQS,
                                            {"by": seq, "seqs": json_list(seqs)})]
    effects.tombstoned.update(gone)
    return len(gone)


def _messages(cur: apsw.Cursor, where: str, value: str) -> Doomed:
    # One read gives both keys (the id for the log and Redis, the seq for the index).
    rows: list[tuple[str, int]] = cur.execute(  # type: ignore[assignment]  # by the schema
        f"SELECT id, seq FROM messages WHERE {where}", (value,)).fetchall()
    return Doomed([r[0] for r in rows], [r[1] for r in rows], where, value)


def _record(cur: apsw.Cursor, event: Event, seq: int, what: tuple[str, str | None, str | None],
            counts: tuple[int, int]) -> None:
    # OR IGNORE: a rebuild replays the event and finds the row (with the live counts).
    cur.execute(
        """INSERT OR IGNORE INTO erasures (seq, event_id, kind, session_id, user_id,
               created_at, messages, events) VALUES (?, ?, ?, ?, ?, ?, ?, ?)""",
        (seq, event.id, *what, event.created_at, *counts))


T = EventType
BY_SESSION, BY_MESSAGE, BY_USER = "session", "message", "user"
ERASURE: dict[str, str] = {
    # Every event logged in a forgotten session (the statement takes them all by session).
    T.MESSAGE_APPENDED: BY_SESSION, T.MESSAGE_IMPORTED: BY_SESSION,
    T.SESSION_CONSOLIDATED: BY_SESSION, T.MACRO_OBSERVED: BY_SESSION,
    T.MACRO_USED: BY_SESSION,
    # Workers' results, which name a message but no session (_TOMBSTONE_RESULTS).
    T.MESSAGE_EMBEDDED: BY_MESSAGE, T.MESSAGE_EMBEDDING_FAILED: BY_MESSAGE,
    # A user's own, named by its user_id (_TOMBSTONE_FACTS, _TOMBSTONE_DOCUMENTS).
    T.FACT_SET: BY_USER, T.FACT_DELETED: BY_USER,
    T.DOCUMENT_PUT: BY_USER, T.DOCUMENT_DELETED: BY_USER, T.DOCUMENT_TOUCHED: BY_USER,
    # No user's data: kept.
    T.FACT_IMPORTED: "none: the seed's facts are global, of no user",
    T.MACRO_IMPORTED: "none: a learned pattern, without any call's arguments",
    T.TASK_SCHEDULED: "none: the schedule is the person's or an agent's, of no user",
    T.TASK_CHANGED: "none: as task.scheduled", T.TASK_DELETED: "none: as task.scheduled",
    T.TASK_IMPORTED: "none: as task.scheduled",
    T.TASK_FIRED: "none: a run of a schedule, in the task's own session",
    T.PREFIX_ALLOWED: "none: the person's approval", T.PREFIX_REVOKED: "none: as allowed",
    T.CONSOLIDATION_REQUESTED: "none: a request naming a session, no content",
    T.RETENTION_APPLIED: "none: names the sessions a pass erased, no content",
    T.SESSION_FORGOTTEN: "none: the erasing event names what it erased, no content",
    T.MESSAGE_FORGOTTEN: "none: as session.forgotten",
    T.USER_FORGOTTEN: "none: as session.forgotten",
    T.KEY_CREATED: "none: the person's grant, naming users and no content of theirs",
    T.KEY_REVOKED: "none: as key.created",
    T.REJECTED_DROPPED: "none: it names rows of rejected events, not whose they were",
    T.WEBHOOK_ADDED: "none: the person's, naming at most a user and no content of theirs",
    T.WEBHOOK_REMOVED: "none: as webhook.added",
}
"""How a forget reaches each event type's payload; a test checks every type has a line and
that the statements above name exactly the types marked by message and by user."""

APPLIERS: dict[str, Applier] = {
    EventType.SESSION_FORGOTTEN: apply_session_forgotten,
    EventType.USER_FORGOTTEN: apply_user_forgotten,
    EventType.MESSAGE_FORGOTTEN: apply_message_forgotten,
}
