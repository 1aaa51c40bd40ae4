"""Retention: ``retention.applied`` erases old messages and the records of old forgets.

The writer's periodic pass (``store/write/retention.py``) logs this event when
``[retention]`` asks for it. Two parts, either or both:

**Messages** (``messages_before`` and ``sessions``): the messages of those sessions
created before the cutoff are erased the way a forget erases them (text, vectors, lexical
index entries, the payloads of their events and of their embedding results become
tombstones), in one transaction. Summaries are kept, with their vectors: they stand in
for the stretch of conversation they replace. A message no summary covers yet goes all
the same: retention bounds how long text is kept, whether or not consolidation ran (the
configuration asks for more days than ``[consolidation] min_age_hours`` so that it can).
``erased_messages`` keeps, for each erased message, its id, session, time, position and
owner (never its text): what a rebuild needs to replay a summary whose sources are gone
and to give the turns that followed them the owner they inherited
(store/projections/sessions.py), and what tells a late result for one of them to be
tombstoned. The sessions' counts and times are taken again from what is left (a session
left empty has no owner any more), their marks move (other processes reload them), and
the pass is recorded in ``erasures`` (other processes drop the vectors they cached). The
event names its sessions, so a rebuild, which never sees the erased messages, moves the
same marks.

**Tool calls** (``calls_before``): every call recorded (``macro.observed``, with its
arguments) before the cutoff becomes a tombstone, whatever its session, so one event and
one relearning cover a pass. The macros are learned again from the calls left
(``relearn_macros`` in store/projections/forgetting.py: what a rebuild, which skips
tombstones, learns), and a recorded use of a macro only those calls had taught becomes a
tombstone too. Only calls logged before this event: one logged later with an older
producer time is not this pass's to erase. No session's mark moves for them (no process
keeps tool calls), so a session with calls and no messages gets no row.

**Expired documents** (``documents_at``): the documents whose time to live had run out
by then are deleted and their events emptied, as the next document event would have
done (store/projections/documents.py); the writer logs it when some have, so that
their values leave the log even when no document is written for a long time.

**Records of forgets** (``forgotten_before``): a forget keeps, on purpose, what it needs
while traces of the forgotten data may still arrive: its event (it names the session or
the user), the tombstones of the events it emptied (so a redelivered event is still a
duplicate), the ids it erased (so a late result is tombstoned) and its row in
``erasures``. For every forget committed before the cutoff all of those go, and a
forgotten session's lone mark (a rebuild, which no longer sees the forget, would not
make it). The records of message retention and of single-message forgets stay: summaries,
and the owner later turns inherited, need them on a rebuild (store/projections/sessions.py).

Nothing a rebuild replays changes what it gives: tombstones are never replayed, and
``memq rebuild --check`` passes.
"""

from __future__ import annotations

import apsw
import orjson

from memq.errors import InvalidEvent
from memq.events import Event, EventType
from memq.store import lexical
from memq.store.effects import Effects, Erasure
from memq.store.projections.base import Applier
from memq.store.projections.documents import expire as expire_documents
from memq.store.projections.erasing import TOMBSTONE, relearn_macros
from memq.store.projections.erasure_steps import drain
from memq.store.projections.sessions import recount, touch

_EACH = "(SELECT value FROM json_each(:old))"

_LONE_MARKS = f"""
    DELETE FROM sessions WHERE last_active_at IS NULL AND changed_seq IN {_EACH}
      AND session_id IN (SELECT session_id FROM erasures WHERE seq IN {_EACH})"""

_EXPIRED = """
    SELECT id, seq, session_id, created_at, user_id, agent_id FROM messages
    WHERE session_id IN (SELECT value FROM json_each(:sessions)) AND created_at < :before
      AND id NOT IN (SELECT summary_id FROM summary_sources)"""

# The expression and WHERE terms of the index events_by_message, word for word.
_TOMBSTONE = f"""
    UPDATE events SET payload = '{TOMBSTONE}', erased_by = :by
    WHERE erased_by IS NULL AND (seq IN (SELECT value FROM json_each(:seqs))
        OR (json_extract(payload, '$.message_id') IN (SELECT value FROM json_each(:ids))
            AND type IN ('message.embedded', 'message.embedding_failed')))
    RETURNING seq"""


# Through events_by_type (type, seq); ``seq < :by``: only calls logged before this event.
_TOMBSTONE_CALLS = f"""
    UPDATE events SET payload = '{TOMBSTONE}', erased_by = :by
    WHERE type = 'macro.observed' AND seq < :by AND created_at < :before
      AND erased_by IS NULL
    RETURNING seq"""


def apply_retention(cur: apsw.Cursor, event: Event, seq: int, effects: Effects) -> None:
    p = event.payload
    _check_cutoffs(p)
    # Its rules about the messages and records of earlier forgets assume them done, as
    # they are on a rebuild: a forget still erasing in steps is finished first.
    drain(cur, effects, applied=seq - 1)
    ids: list[str] = []
    events = 0
    if p.get("messages_before") is not None:
        ids, events = _expire_messages(cur, p["messages_before"], p["sessions"], seq,
                                       effects)
    if p.get("calls_before") is not None:
        events += _expire_tool_calls(cur, p["calls_before"], seq, effects)
    if p.get("forgotten_before") is not None:
        events += _drop_forget_records(cur, p["forgotten_before"], seq, effects)
    if p.get("documents_at") is not None:
        events += expire_documents(cur, p["documents_at"], seq)
    if not ids and not events:
        return
    # OR IGNORE: a rebuild replays the event and finds the row (with the live counts).
    cur.execute(
        """INSERT OR IGNORE INTO erasures (seq, event_id, kind, session_id, user_id,
               created_at, messages, events) VALUES (?, ?, 'retention', NULL, NULL, ?, ?, ?)""",
        (seq, event.id, event.created_at, len(ids), events))
    # secure_delete zeroes what went in the file; the WAL still holds it until the
    # writer's after-commit truncates it, and RQ jobs may carry the messages' text.
    effects.erased.append(Erasure(event.id, seq, tuple(ids)))


_PARTS = ("forgotten_before", "messages_before", "calls_before", "documents_at")


def _check_cutoffs(p: dict[str, object]) -> None:
    if all(p.get(key) is None for key in _PARTS):
        raise InvalidEvent(f"retention.applied: names none of {', '.join(_PARTS)}")
    if (p.get("messages_before") is None) != (p.get("sessions") is None):
        raise InvalidEvent("retention.applied: messages_before and sessions go together")


def _expire_messages(cur: apsw.Cursor, before: str, sessions: list[str], seq: int,
                     effects: Effects) -> tuple[list[str], int]:
    """Erase the messages; returns their ids and how many events became tombstones."""
    sessions_json = orjson.dumps(sessions).decode()
    rows = cur.execute(_EXPIRED, {"sessions": sessions_json, "before": before}).fetchall()
    ids = [str(r[0]) for r in rows]
    events = 0
    if rows:
        seqs = [int(r[1]) for r in rows]  # type: ignore[arg-type]  # seq, by the schema
        seqs_json = orjson.dumps(seqs).decode()
        lexical.unindex(cur, seqs)
        cur.executemany(
            """INSERT OR IGNORE INTO erased_messages (message_id, erased_by, session_id,
                   created_at, user_id, agent_id, seq) VALUES (?, ?, ?, ?, ?, ?, ?)""",
            [(r[0], seq, r[2], r[3], r[4], r[5], r[1]) for r in rows])
        gone = [int(r[0]) for r in cur.execute(
            _TOMBSTONE, {"by": seq, "seqs": seqs_json, "ids": orjson.dumps(ids).decode()})]
        # Told to the batch, as a forget's are: its marks must skip them (a rebuild never
        # sees them), or an append earlier in the batch marks a session the log forgot.
        effects.tombstoned.update(gone)
        events = len(gone)
        cur.execute("DELETE FROM messages WHERE id IN (SELECT value FROM json_each(?))",
                    (orjson.dumps(ids).decode(),))
    recount(cur, sessions)
    touch(cur, dict.fromkeys(sessions, seq))
    return ids, events


def _expire_tool_calls(cur: apsw.Cursor, before: str, seq: int, effects: Effects) -> int:
    """Empty the calls recorded before ``before``; returns how many events went."""
    gone = [int(r[0]) for r in cur.execute(_TOMBSTONE_CALLS, {"by": seq, "before": before})]
    if not gone:
        return 0
    effects.tombstoned.update(gone)
    return len(gone) + relearn_macros(cur, seq)


def _drop_forget_records(cur: apsw.Cursor, before: str, seq: int, effects: Effects) -> int:
    """Delete what forgets older than ``before`` kept; returns how many events went."""
    # Only forgets logged before this event: a rebuild in place still has the rows of
    # later ones, whose time is the producer's and may be older than the cutoff.
    old = [int(r[0]) for r in cur.execute(
        "SELECT seq FROM erasures WHERE created_at < ? AND seq < ? "
        "AND kind IN ('session', 'user')", (before, seq))]
    if not old:
        return 0
    # A forget earlier in this batch leaves the log now: the batch's marks skip it.
    effects.tombstoned.update(old)
    params = {"old": orjson.dumps(old).decode()}
    cur.execute(_LONE_MARKS, params)
    # The feed's consumers behind the last of them would miss them: it says so.
    cur.execute(f"""INSERT INTO feed_horizon (id, seq)
        SELECT 1, max(seq) FROM events WHERE erased_by IN {_EACH} OR seq IN {_EACH}
        HAVING max(seq) IS NOT NULL
        ON CONFLICT (id) DO UPDATE SET seq = max(seq, excluded.seq)""", params)
    cur.execute(f"DELETE FROM events WHERE erased_by IN {_EACH} OR seq IN {_EACH}", params)
    events = cur.getconnection().changes()
    cur.execute(f"DELETE FROM erased_messages WHERE erased_by IN {_EACH}", params)
    cur.execute(f"DELETE FROM erasures WHERE seq IN {_EACH}", params)
    return events


APPLIERS: dict[str, Applier] = {
    EventType.RETENTION_APPLIED: apply_retention,
}
