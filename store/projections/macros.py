"""The ``macros`` projection: tool transitions learned from ``macro.observed`` events.

The rule itself (patterns, templates, confidence) is :mod:`memq.toolcalls`; this module
only keeps its counts. Per session, ``macro_last_calls`` holds the previous call; each
new call adds one transition from it, under the previous call's argument pattern and
under its tool alone. ``macro_next_args`` counts the argument templates seen after each
macro, at most :data:`MAX_TEMPLATES` per macro (the least used, then the oldest, goes).
``created_at`` / ``updated_at`` come from the events, never from the clock.

Each transition is counted twice when its session has a user: into the tenant-wide
aggregate (``owner`` NULL), which local clients and keys of every user read, and into
rows of that user (``owner``, the stored user id), which a key limited to some users reads
instead (``producers/macros.py``): such a key is never shown a word of another user's
calls. The session's user is the one at that point of the log
(:func:`memq.store.projections.sessions.user_at`), so a replay finds the same.

A learned macro's id is a hash of its transition (:func:`content_id`; a user's row hashes
its owner too), not its place in the order macros were learned: forgetting calls relearns
the projection from the calls left, and every macro those calls still teach keeps its id,
so the uses recorded of it and the ids agents hold stay right. ``ordinal`` is that place,
what ids were before migration 0024: a ``macro.used`` logged before it (version 1) named
its macro so, and is turned into a use by id when a replay applies it
(:func:`apply_used`).
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable
from typing import Any, NamedTuple

import apsw
import orjson

from memq.errors import InvalidEvent
from memq.events import INT64_LIMIT, Event, EventType, check_identifier
from memq.store.effects import Effects
from memq.store.projections.base import Applier
from memq.store.projections.sessions import user_at
from memq.store.write.log import read_events
from memq.toolcalls import (
    ANY_ARGS,
    PRIOR_HITS,
    PRIOR_TOTAL,
    args_pattern,
    next_args_template,
    scrub_template,
)

MAX_TEMPLATES = 16
"""Candidate next-argument templates kept per macro (bounds the table for free text)."""

MAX_MACRO_ID = 2**53 - 1
"""Learned ids stay at or below this, so that a JSON reader holding numbers as doubles
(JavaScript) reads them exactly."""


def content_id(tool: str, pattern: str, next_tool: str, owner: str | None = None) -> int:
    """The id a learned macro ``tool(pattern)`` → ``next_tool`` of ``owner`` (None: the
    tenant-wide aggregate) is given, unless another macro holds it (then the next free
    one, :func:`_free_id`)."""
    fields = [tool, pattern, next_tool] if owner is None else [tool, pattern, next_tool, owner]
    digest = hashlib.blake2b(orjson.dumps(fields), digest_size=8, person=b"memq.macro").digest()
    return int.from_bytes(digest, "big") % MAX_MACRO_ID + 1


def apply_observed(cur: apsw.Cursor, event: Event, seq: int, effects: Effects) -> None:
    observe(cur, event, seq, per_user=True)


def observe(cur: apsw.Cursor, event: Event, seq: int, *, per_user: bool) -> None:
    """Count the transition from the session's previous call; ``per_user``: for the
    session's user too (False only where the log predates users, :func:`relearn`)."""
    tool = check_identifier("tool", event.payload["tool"], error=InvalidEvent)
    args: dict[str, Any] = event.payload["args"]
    session = event.session_id
    previous = cur.execute(
        "SELECT tool, args_json FROM macro_last_calls WHERE session_id = ?", (session,)
    ).fetchone()
    if previous is not None:
        previous_tool, previous_args = str(previous[0]), orjson.loads(str(previous[1]))
        owner = user_at(cur, str(session), seq) if per_user else None
        learn(cur, previous_tool, previous_args, tool, args, seq, event.created_at, owner)
    cur.execute(
        """INSERT INTO macro_last_calls (session_id, tool, args_json, seq) VALUES (?, ?, ?, ?)
           ON CONFLICT (session_id) DO UPDATE SET
               tool = excluded.tool, args_json = excluded.args_json, seq = excluded.seq""",
        (session, tool, orjson.dumps(args).decode(), seq),
    )


class _Transition(NamedTuple):
    tool: str
    pattern: str
    next_tool: str
    owner: str | None
    at: str

    @property
    def key(self) -> dict[str, Any]:
        """The query parameters: ``holder`` is the owner as the index holds it."""
        return {"tool": self.tool, "pattern": self.pattern, "next": self.next_tool,
                "holder": self.owner or "", "at": self.at}


def learn(
    cur: apsw.Cursor, tool: str, args: dict[str, Any], next_tool: str,
    next_args: dict[str, Any], seq: int, at: str, owner: str | None = None,
) -> None:
    """Count one transition ``tool(args)`` → ``next_tool(next_args)``: into the tenant-wide
    aggregate, and into ``owner``'s rows when the calls are a user's."""
    template = next_args_template(next_args, args)
    patterns = (args_pattern(args), ANY_ARGS)
    for holder in (None,) if owner is None else (None, owner):
        for pattern in patterns:
            transition = _Transition(tool, pattern, next_tool, holder, at)
            macro_id, current = _count_transition(cur, transition)
            _count_trigger(cur, transition)
            _count_template(cur, macro_id, current, template, seq)


# The terms of the index macros_by_transition, word for word, for SQLite to seek it.
_SAME_TRIGGER = """trigger_tool = :tool AND trigger_args_pattern = :pattern
    AND ifnull(owner, '') = :holder"""


def _count_transition(cur: apsw.Cursor, transition: _Transition) -> tuple[int, str | None]:
    """Add one to n(A→B); returns the macro's id and its current next_args."""
    key = transition.key
    row = cur.execute(
        f"""UPDATE macros SET transition_count = transition_count + 1, updated_at = :at
            WHERE {_SAME_TRIGGER} AND next_tool = :next RETURNING id, next_args""",
        key,
    ).fetchone()
    if row is not None:
        return int(row[0]), None if row[1] is None else str(row[1])
    # A new successor starts with its siblings' n(A); _count_trigger then adds this one.
    # (Looked up apart: as a subquery inside the INSERT it cost five times more.)
    siblings = cur.execute(f"SELECT max(trigger_count) FROM macros WHERE {_SAME_TRIGGER}",
                           key).fetchone()
    macro_id = _free_id(cur, content_id(*transition[:4]))
    # A place only for the aggregate, the rows ids were places of (before 0024).
    ordinal = cur.execute(_NEXT_ORDINAL).get if transition.owner is None else None
    cur.execute(
        """INSERT INTO macros (id, ordinal, trigger_tool, trigger_args_pattern, next_tool,
               next_args, confidence, used_count, created_at, updated_at, transition_count,
               trigger_count, owner)
           VALUES (:id, :ordinal, :tool, :pattern, :next, NULL, 0.0, 0, :at, :at, 1, :n,
               :owner)""",
        {**key, "id": macro_id, "ordinal": ordinal, "owner": transition.owner,
         "n": (siblings[0] if siblings else None) or 0},
    )
    return macro_id, None


# Past an imported id at SQLite's limit there is no next place (the old rule, ids by
# place, then let SQLite pick one at random): such a macro has none.
_NEXT_ORDINAL = f"""
    SELECT CASE WHEN max(ordinal) >= {INT64_LIMIT - 1} THEN NULL
                ELSE coalesce(max(ordinal), 0) + 1 END FROM macros"""


def _free_id(cur: apsw.Cursor, wanted: int) -> int:
    # Taken only by a hash collision or an imported macro's id: rare, and settled the same
    # way by every replay of the same calls.
    while cur.execute("SELECT 1 FROM macros WHERE id = ?", (wanted,)).fetchone() is not None:
        wanted = wanted % MAX_MACRO_ID + 1
    return wanted


def _count_trigger(cur: apsw.Cursor, transition: _Transition) -> None:
    # n(A) grew by one, so every successor of A under this pattern gets a new estimate:
    # memq.toolcalls.confidence, written in SQL (right-hand sides read the old values).
    cur.execute(
        f"""UPDATE macros SET trigger_count = trigger_count + 1,
                confidence = (transition_count + :hits) / (trigger_count + 1 + :total)
            WHERE {_SAME_TRIGGER}""",
        {"hits": PRIOR_HITS, "total": PRIOR_TOTAL, **transition.key},
    )


def _count_template(
    cur: apsw.Cursor, macro_id: int, current: str | None, template: str, seq: int
) -> None:
    key = {"id": macro_id, "template": template, "seq": seq}
    row = cur.execute(
        """UPDATE macro_next_args SET count = count + 1, last_seq = :seq
           WHERE macro_id = :id AND template = :template RETURNING count""",
        key,
    ).fetchone()
    count = 1 if row is None else int(row[0])
    if row is None:
        cur.execute("INSERT INTO macro_next_args VALUES (:id, :template, 1, :seq)", key)
        _prune_templates(cur, macro_id)
    # The template just counted is the latest, so it wins every tie: it becomes next_args
    # unless the current one was seen strictly more often.
    if current == template:
        return
    best = cur.execute(
        "SELECT count FROM macro_next_args WHERE macro_id = ? AND template = ?",
        (macro_id, current),
    ).fetchone()
    if best is None or int(best[0]) <= count:
        cur.execute("UPDATE macros SET next_args = ? WHERE id = ?", (template, macro_id))


def _prune_templates(cur: apsw.Cursor, macro_id: int) -> None:
    # Templates arrive one at a time, so at most one is over the bound: the least used,
    # then the oldest, goes. Counting first is cheap; the ordered search is not.
    over = cur.execute(
        "SELECT count(*) > ? FROM macro_next_args WHERE macro_id = ?", (MAX_TEMPLATES, macro_id)
    ).fetchone()
    if over is not None and over[0]:
        cur.execute(
            """DELETE FROM macro_next_args WHERE rowid = (
                   SELECT rowid FROM macro_next_args WHERE macro_id = ?
                   ORDER BY count, last_seq LIMIT 1)""",
            (macro_id,),
        )


def forget_session(cur: apsw.Cursor, session_id: str) -> None:
    """Drop what the projection keeps of one session (for ``session.forgotten``).

    Learned macros are aggregates over sessions and stay; the session's last call, which
    holds its arguments, goes, and a later call of that session starts a new chain.
    """
    cur.execute("DELETE FROM macro_last_calls WHERE session_id = ?", (session_id,))


def apply_used(cur: apsw.Cursor, event: Event, seq: int, effects: Effects) -> None:
    macro_id = event.payload["macro_id"]
    if event.version == 1:
        macro_id = _by_place(cur, macro_id, seq)
    cur.execute(
        "UPDATE macros SET used_count = used_count + 1, updated_at = ? WHERE id = ?",
        (event.created_at, macro_id),
    )
    if cur.getconnection().changes() == 0:
        raise InvalidEvent(f"unknown macro {macro_id}")


def _by_place(cur: apsw.Cursor, place: int, seq: int) -> int:
    """The id of the macro a use logged before migration 0024 named by its place.

    Only a replay meets such a use (the writer logs every use by id), in migrations 0012
    and 0024: the logged use is rewritten to name that id, in version 2, so that no later
    replay, after a forget has moved the places, reads the place again.
    """
    macro_id = cur.execute("SELECT id FROM macros WHERE ordinal = ?", (place,)).get
    if macro_id is None:
        raise InvalidEvent(f"unknown macro {place} (a use logged by place, before migration "
                           "0024)")
    cur.execute("UPDATE events SET version = 2, payload = ? WHERE seq = ?",
                (orjson.dumps({"macro_id": macro_id}).decode(), seq))
    return int(macro_id)


def apply_imported(cur: apsw.Cursor, event: Event, seq: int, effects: Effects) -> None:
    """One row of the legacy ``macros`` table, as it was: id (its ordinal too), confidence,
    uses and times.

    memq's counts behind the confidence start at zero: the seed did not keep them. The
    seed's confidence stands until memq itself sees a call of the trigger tool with that
    pattern, and from then on memq's rule (:mod:`memq.toolcalls`) estimates it.
    """
    p = event.payload
    for name in ("trigger_tool", "next_tool"):
        check_identifier(name, p[name], error=InvalidEvent)
    # The seed kept literal values in its templates: its credentials are not carried over.
    p = {**p, "trigger_args_pattern": scrub_template(p["trigger_args_pattern"]),
         "next_args": None if p.get("next_args") is None else scrub_template(p["next_args"])}
    try:
        cur.execute(
            """INSERT INTO macros (id, ordinal, trigger_tool, trigger_args_pattern, next_tool,
                   next_args, confidence, used_count, created_at, updated_at,
                   transition_count, trigger_count)
               VALUES (:macro_id, :macro_id, :trigger_tool, :trigger_args_pattern, :next_tool,
                   :next_args, :confidence, :used_count, :created_at, :updated_at, 0, 0)""",
            p,
        )
    except apsw.ConstraintError as exc:
        raise InvalidEvent(
            f"macro {p['macro_id']} ({p['trigger_tool']} {p['trigger_args_pattern']} -> "
            f"{p['next_tool']}) duplicates another macro's id or transition"
        ) from exc


def relearn(cur: apsw.Cursor, refused: Callable[[int], None] | None = None,
            before: int | None = None) -> int:
    """Rebuild this projection alone from the log, under today's rule; returns the events.

    For a rule change that the rows must follow (a migration), or for calls that were
    forgotten (store/projections/forgetting.py): replaying the events that feed these
    tables, in log order, gives the rows a full rebuild would, ids included. With
    ``refused``, an event that no longer applies (a use of a macro that only forgotten
    calls had taught) is handed to it by position instead of stopping the replay. With
    ``before``, only the events logged before that position: an erasing event relearns
    what came before it, since the events after it in its batch are in the log already
    and would otherwise be applied twice.
    """
    cur.execute("DELETE FROM macros; DELETE FROM macro_next_args; DELETE FROM macro_last_calls")
    appliers = {**APPLIERS, EventType.MACRO_OBSERVED: _observing(cur)}
    effects = Effects()  # macros owe no follow-up
    feeding = (*APPLIERS, EventType.SESSION_FORGOTTEN)
    count = 0
    for seq, event in read_events(cur.getconnection(), types=feeding, before_seq=before):
        if event.type == EventType.SESSION_FORGOTTEN:
            forget_session(cur, str(event.session_id))
        else:
            try:
                appliers[event.type](cur, event, seq, effects)
            except InvalidEvent:
                if refused is None:
                    raise
                refused(seq)
        count += 1
    return count


def _observing(cur: apsw.Cursor) -> Applier:
    """``macro.observed``'s applier for a relearning: per user too, unless the schema
    predates the positions of erased messages (migration 0012 relearns before users
    existed; 0037 learns the per-user rows)."""
    known = cur.execute("SELECT 1 FROM pragma_table_info('erased_messages') "
                        "WHERE name = 'seq'").fetchone() is not None
    return lambda c, event, seq, effects: observe(c, event, seq, per_user=known)


APPLIERS: dict[str, Applier] = {
    EventType.MACRO_OBSERVED: apply_observed,
    EventType.MACRO_USED: apply_used,
    EventType.MACRO_IMPORTED: apply_imported,
}
