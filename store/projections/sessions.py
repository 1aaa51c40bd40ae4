"""The ``sessions`` projection: per session, its mark, its owner, and how much it holds.

**The mark.** ``changed_seq`` is the ``seq`` of the last event that changed the session's
messages (an append, an import, a consolidation, a forget). It only grows, so a reader
that remembers the value its copy of a session was read at knows, with one primary-key
lookup, whether that copy is still current: that is how working memory stays fresh across
processes (``producers/working_memory.py``). Embeddings do not change it: working memory
holds no vectors. An applier that changes a session's messages for any other event type
must add the type to :data:`CHANGES_MESSAGES` (or call :func:`touch` itself), or other
processes keep showing what it changed.

**The owner.** A session belongs to a user and, optionally, to one of that user's
agents. The first message of a session fixes both; a later message may leave them out
(it inherits them) but may not name others: such an event is refused, so an append can
never move a session, or its history, to another user. A session whose first message
named no user stays without one. The owner is copied onto every message row
(``messages.user_id`` / ``agent_id``), which is what searches across a user's sessions
seek.

**The counts.** ``message_count`` counts the conversation's messages (summaries are not
counted), and ``started_at`` / ``last_active_at`` are the earliest and latest
``created_at`` of its messages: both come from the events, so a rebuild gives the same
rows. A row without messages (a forgotten session keeps its mark) has no times. An
erasure of some of a session's messages takes them again from what is left
(:func:`recount`, :func:`subtract`).

**Owners of erased messages.** A rebuild never sees an erased message, and a turn that
followed it without naming an owner would take none, where it had inherited the owner
the erased message fixed. So a session that has no owner when a message claims it takes
the owner of a message erased *later* than this claim and written *before* it, if
``erased_messages`` knows one (a message forget keeps its position): the owner the session
had at that point. Live, no erasure is ever later than the event being applied, and the
lookup finds nothing.
"""

from __future__ import annotations

from collections.abc import Collection, Iterable, Mapping
from typing import Any

import apsw
import orjson

from memq.errors import InvalidEvent
from memq.events import Event, EventType, check_identifier
from memq.store.read.hidden import visible
from memq.store.read.sessions import Owner
from memq.store.write import bulk

CHANGES_MESSAGES = frozenset({
    EventType.MESSAGE_APPENDED, EventType.MESSAGE_IMPORTED,
    EventType.SESSION_CONSOLIDATED, EventType.SESSION_FORGOTTEN,
    EventType.MESSAGE_FORGOTTEN,
})
"""Event types whose applier changes the ``messages`` rows of the event's session."""

_TOUCH = f"""
    INSERT INTO sessions (session_id, changed_seq)
    SELECT {bulk.select_columns(2)} FROM json_each(?1) WHERE true
    ON CONFLICT (session_id) DO UPDATE
        SET changed_seq = max(changed_seq, excluded.changed_seq)"""

_OWNERS = """SELECT session_id, user_id, agent_id FROM sessions
    WHERE session_id IN (SELECT value FROM json_each(?)) AND last_active_at IS NOT NULL"""

# One owner per session (all erased messages alive at that point had it).
_OWNERS_THEN = """
    SELECT j.key, e.user_id, e.agent_id FROM json_each(?) AS j
    JOIN erased_messages AS e ON e.session_id = j.key AND e.seq IS NOT NULL
        AND e.seq < j.value AND e.erased_by > j.value
    GROUP BY j.key"""

# The messages the session holds now, then those erased after ``seq``: a seek each.
_USER_AT = f"""
    SELECT * FROM (SELECT user_id FROM messages
                   WHERE session_id = :session AND seq < :seq AND {visible()} LIMIT 1)
    UNION ALL
    SELECT * FROM (SELECT user_id FROM erased_messages
                   WHERE session_id = :session AND seq < :seq AND erased_by > :seq LIMIT 1)"""

_RECOUNT = f"""
    UPDATE sessions SET
        message_count = (SELECT count(*) FROM messages m WHERE m.session_id = sessions.session_id
                         AND m.id NOT IN (SELECT summary_id FROM summary_sources)
                         AND {visible("m")}),
        started_at = (SELECT min(created_at) FROM messages m
                      WHERE m.session_id = sessions.session_id AND {visible("m")}),
        last_active_at = (SELECT max(created_at) FROM messages m
                          WHERE m.session_id = sessions.session_id AND {visible("m")})
    WHERE session_id IN (SELECT value FROM json_each(:sessions))"""

# Two seeks of messages_by_session, whatever the session's length.
_SUBTRACT = f"""
    UPDATE sessions SET
        message_count = message_count - :gone,
        started_at = (SELECT min(created_at) FROM messages WHERE session_id = :session
                      AND {visible()}),
        last_active_at = (SELECT max(created_at) FROM messages WHERE session_id = :session
                          AND {visible()})
    WHERE session_id = :session"""

_EMPTY_LOSE_OWNER = """
    UPDATE sessions SET user_id = NULL, agent_id = NULL
    WHERE session_id IN (SELECT value FROM json_each(:sessions)) AND last_active_at IS NULL"""

_CLAIM = f"""
    INSERT INTO sessions (session_id, changed_seq, user_id, agent_id, started_at,
                          last_active_at, message_count)
    SELECT {bulk.select_columns(7)} FROM json_each(?1) WHERE true
    ON CONFLICT (session_id) DO UPDATE SET
        user_id = excluded.user_id, agent_id = excluded.agent_id,
        started_at = min(ifnull(started_at, excluded.started_at), excluded.started_at),
        last_active_at = max(ifnull(last_active_at, excluded.last_active_at),
                             excluded.last_active_at),
        message_count = message_count + excluded.message_count"""
# (`WHERE true`: an upsert's SELECT needs a WHERE clause to parse unambiguously. A row
# without messages has no owner to keep, so the owner is written on every claim.)


def changes(
    numbered: Iterable[tuple[int, Event]], skip: Collection[int] = ()
) -> dict[str, int]:
    """The newest position per session among events that change its messages, leaving out
    those at the positions ``skip`` (made tombstones in the same batch: they changed
    nothing, and a rebuild never sees them)."""
    marks: dict[str, int] = {}
    for seq, event in numbered:
        if event.type in CHANGES_MESSAGES and event.session_id is not None and seq not in skip:
            marks[event.session_id] = max(seq, marks.get(event.session_id, 0))
    return marks


def touch(cur: apsw.Cursor, marks: dict[str, int]) -> None:
    """Move each session's ``changed_seq`` forward to its position in ``marks``."""
    if marks:
        bulk.insert(cur, _TOUCH, marks.items())


def recount(cur: apsw.Cursor, sessions: list[str]) -> None:
    """Take the sessions' counts and times again from the messages they have left; a
    session left empty has no owner any more (its next message may name any)."""
    params = {"sessions": orjson.dumps(sessions).decode()}
    cur.execute(_RECOUNT, params)
    cur.execute(_EMPTY_LOSE_OWNER, params)


def subtract(cur: apsw.Cursor, session: str, gone: int) -> None:
    """:func:`recount` for one session that lost ``gone`` counted messages (summaries do
    not count), without counting the others again: its times are taken again from what
    is left."""
    cur.execute(_SUBTRACT, {"session": session, "gone": gone})
    cur.execute(_EMPTY_LOSE_OWNER, {"sessions": orjson.dumps([session]).decode()})


def claim(cur: apsw.Cursor, rows: list[dict[str, Any]], *, counted: bool = True) -> None:
    """Give each message row its session's owner, creating or updating the sessions.

    Each row has ``session_id``, ``created_at``, ``seq`` and the owner its event asked
    for in ``user_id`` / ``agent_id`` (None: the session's own); those two are replaced by
    the session's owner. ``counted=False`` (summaries) leaves the message counts alone.
    Raises :class:`InvalidEvent` if a row names another owner than its session's, and
    changes nothing then.
    """
    owners = _owners(cur, {row["session_id"] for row in rows})
    owners.update(_owners_then(cur, rows, owners))
    stats: dict[str, list[Any]] = {}
    for row in rows:
        session = row["session_id"]
        owner = owners.get(session)
        requested = _requested(row)
        if owner is None:
            owner = owners[session] = requested
        elif requested != Owner(None, None):
            _check_same(session, owner, requested)
        row["user_id"], row["agent_id"] = owner
        _add(stats, session, owner, row, int(counted))
    bulk.insert(cur, _CLAIM, ([session, *values] for session, values in stats.items()))


def owned(cur: apsw.Cursor, sessions: Iterable[str]) -> dict[str, Owner]:
    """The owner of each of ``sessions`` that has messages and an owner: no message can
    change it (only emptying the session does)."""
    return {session: owner for session, owner in _owners(cur, sessions).items()
            if owner != Owner(None, None)}


def user_at(cur: apsw.Cursor, session: str, seq: int) -> str | None:
    """The user whose session ``session`` was at position ``seq`` of the log: the user of
    its messages written before ``seq`` and still there at ``seq`` (all of them had the
    session's owner then), or None. The same live, on a rebuild and when a projection is
    relearned from the log: the messages erased since are found in ``erased_messages``."""
    found = cur.execute(_USER_AT, {"session": session, "seq": seq}).fetchone()
    return None if found is None else found[0]


def _owners(cur: apsw.Cursor, sessions: Iterable[str]) -> dict[str, Owner]:
    wanted = orjson.dumps(sorted(sessions)).decode()
    return {str(s): Owner(u, a) for s, u, a in cur.execute(_OWNERS, (wanted,))}


def _owners_then(cur: apsw.Cursor, rows: list[dict[str, Any]], known: dict[str, Owner]
                 ) -> dict[str, Owner]:
    """Owners of sessions without one, from messages erased since (see the docstring)."""
    first: dict[str, int] = {}
    for row in rows:
        if row["session_id"] not in known:
            first.setdefault(row["session_id"], row["seq"])
    if not first:
        return {}
    found = cur.execute(_OWNERS_THEN, (orjson.dumps(first).decode(),))
    return {str(s): Owner(u, a) for s, u, a in found}


def _requested(row: Mapping[str, Any]) -> Owner:
    user, agent = row.get("user_id"), row.get("agent_id")
    if user is not None:
        user = check_identifier("user_id", user, error=InvalidEvent)
    if agent is not None:
        agent = check_identifier("agent_id", agent, error=InvalidEvent)
    return Owner(user, agent)


def _check_same(session: str, owner: Owner, requested: Owner) -> None:
    for what, have, asked in (("user", owner.user_id, requested.user_id),
                              ("agent", owner.agent_id, requested.agent_id)):
        if asked is not None and asked != have:
            held = "no " + what if have is None else f"{what} {have!r}"
            raise InvalidEvent(
                f"session {session!r} belongs to {held}, not to {what} {asked!r}: the first "
                f"message of a session fixes its owner")


def _add(stats: dict[str, list[Any]], session: str, owner: Owner, row: Mapping[str, Any],
         count: int) -> None:
    at, seq = row["created_at"], row["seq"]
    found = stats.get(session)
    if found is None:
        stats[session] = [seq, owner.user_id, owner.agent_id, at, at, count]
        return
    found[0] = max(found[0], seq)
    found[3], found[4] = min(found[3], at), max(found[4], at)
    found[5] += count
