"""Big forgets erased in bounded steps, invisible from the start.

Erasing a user of 10,000 turns takes about a second of the writer's time, and in one
transaction every other agent's commit would wait that long. So a forget that reaches more
than :data:`STEP` messages, or a session another forget is still erasing, is *deferred*
(:func:`deferred`): its own transaction erases what is small (facts, documents, the
sessions' rows and macro chains: store/projections/forgetting.py) and writes a row in
``erasing`` for each of its sessions. From that commit on, every read leaves out those
sessions' messages logged before the forget (``store/read/hidden.py``). Then the writer
erases them between batches (:func:`step`), each step a transaction of its own:

1. up to :data:`STEP` of the session's hidden messages: their words in the lexical index,
   their rows, their events and results, as a small forget erases them;
2. then the session's other events logged before the forget, :data:`EVENT_STEP` at a time;
3. then its row leaves ``erasing``. After the forget's last session, the macros are
   learned again if forgotten calls taught any, the counts are written in ``erasures``,
   and the follow-up runs as for a small forget (the WAL, the jobs in Redis, the outcome
   ``wait_forgotten`` waits for).

The end is what applying the whole forget at once gives: every step erases only what was
logged before the forget, and what arrives meanwhile about the hidden messages (a late
embedding, a summary of them) is tombstoned on arrival (``erasing.erased_by``), as it is once
they are gone. A rebuild does it at once (:func:`drain` after each forget), as does a
retention pass, whose rules about old forgets assume them finished; and so does a forget
of a message or a user that a forget under way still hides (rare: a retry, or one
message of a session being forgotten), so that its outcome says the text is gone. Two
forgets of one session each keep their row and are erased in their order. A crash
between steps loses nothing: the rows are in the database, and the writer goes on where
they say.
"""

from __future__ import annotations

import apsw
import orjson

from memq.store.effects import Effects, Erasure
from memq.store.projections.erasing import (
    erase_messages,
    forget_legacy_rows,
    forget_rejected,
    relearn_macros,
)
from memq.store.read.hidden import hides

STEP = 16
"""Messages one step erases: their words leave the lexical index in place (0.2-0.6 ms
each, fewer the fewer segments the index has). 16 keeps a step near 10 ms: another agent's
commit p99 during a 10,000-turn forget 28 ms (32: 49 ms), every trace gone in 8 s either
way (bench/forget_stall.py)."""

EVENT_STEP = 1000
"""Other events of a session one step empties."""

_EACH = "(SELECT value FROM json_each(?))"

_HIDDEN = """
    SELECT count(*) FROM (SELECT 1 FROM messages
        WHERE session_id IN (SELECT value FROM json_each(:sessions)) AND seq < :by
        LIMIT :step + 1)"""
_ERASING = "SELECT 1 FROM erasing WHERE session_id IN (SELECT value FROM json_each(?)) LIMIT 1"
_NEXT = "SELECT session_id, by_seq FROM erasing ORDER BY by_seq, session_id LIMIT 1"
_CHUNK = "SELECT id, seq FROM messages WHERE session_id = ? AND seq < ? LIMIT ?"
_EVENTS = """
    UPDATE events SET payload = '{}', erased_by = :by
    WHERE seq IN (SELECT seq FROM events WHERE session_id = :session AND seq < :by
                  AND erased_by IS NULL LIMIT :step)
    RETURNING seq"""
_MACRO_EVENTS = """SELECT 1 FROM events
    WHERE erased_by = ? AND type IN ('macro.observed', 'macro.used') LIMIT 1"""
# A user's sessions emptied by the forget and left without an owner (see forgetting.py's
# _DELETE_SESSIONS, whose second half this is: its first ran with the forget), as they
# were then: a mark a later event left (a later forget's) is that event's.
_EMPTIED = """
    DELETE FROM sessions WHERE user_id IS NULL AND last_active_at IS NULL AND changed_seq < :by
        AND session_id IN (SELECT session_id FROM erased_messages WHERE erased_by = :by)"""
_HIDES_USER = f"""SELECT 1 FROM messages AS m JOIN erasing AS x ON {hides("m")}
    WHERE m.user_id = ? LIMIT 1"""
_COUNTS = """
    UPDATE erasures SET
        messages = (SELECT count(*) FROM erased_messages WHERE erased_by = :by),
        events = (SELECT count(*) FROM events WHERE erased_by = :by)
    WHERE seq = :by"""


def deferred(cur: apsw.Cursor, sessions: list[str], seq: int, effects: Effects,
             user: str | None = None) -> bool:
    """Whether the forget at ``seq`` of ``sessions`` (``user``'s) is erased in steps; if so,
    its sessions' messages are hidden from now on, and what is small goes at once: their
    pending embeddings, their macro chains, the rejected entries that name them."""
    doomed = orjson.dumps(sessions).decode()
    count = int(cur.execute(_HIDDEN, {"sessions": doomed, "by": seq, "step": STEP}).get or 0)
    if count <= STEP and cur.execute(_ERASING, (doomed,)).fetchone() is None:
        return False
    cur.executemany("INSERT OR IGNORE INTO erasing (session_id, by_seq) VALUES (?, ?)",
                    [(session, seq) for session in sessions])
    if effects.embed:  # appended earlier in this batch: their text must not reach Redis
        ids = orjson.dumps([mid for mid, _ in effects.embed]).decode()
        gone = {str(r[0]) for r in cur.execute(
            f"SELECT id FROM messages WHERE id IN {_EACH} AND session_id IN {_EACH}",
            (ids, doomed))}
        effects.embed[:] = [(mid, text) for mid, text in effects.embed if mid not in gone]
    cur.execute(f"DELETE FROM macro_last_calls WHERE session_id IN {_EACH}", (doomed,))
    forget_rejected(cur, sessions, [], user)
    effects.erasing = True
    return True


def step(cur: apsw.Cursor, effects: Effects, applied: int | None = None) -> bool:
    """One bounded step of the oldest erasure under way; False when there is none.
    ``applied``: the last position applied, when the log holds more (a rebuild); None:
    every event of the log is applied (the live writer)."""
    found = cur.execute(_NEXT).fetchone()
    if found is None:
        return False
    session, by = str(found[0]), int(found[1])
    rows: list[tuple[str, int]] = cur.execute(  # type: ignore[assignment]  # by the schema
        _CHUNK, (session, by, STEP)).fetchall()
    if rows:
        erase_messages(cur, [r[0] for r in rows], [r[1] for r in rows], by, effects)
    elif made := [int(r[0]) for r in cur.execute(
            _EVENTS, {"by": by, "session": session, "step": EVENT_STEP})]:
        effects.tombstoned.update(made)  # in a batch (a drain), they move no mark
    else:
        forget_legacy_rows(cur, [session], [])
        cur.execute("DELETE FROM erasing WHERE session_id = ? AND by_seq = ?", (session, by))
        if cur.execute("SELECT 1 FROM erasing WHERE by_seq = ?", (by,)).fetchone() is None:
            _finish(cur, by, effects, applied)
    return True


def drain(cur: apsw.Cursor, effects: Effects, applied: int | None = None) -> None:
    """Finish every erasure under way, in this transaction (``applied``: as for
    :func:`step`)."""
    while step(cur, effects, applied):
        pass


def pending(conn: apsw.Connection) -> bool:
    return conn.execute("SELECT 1 FROM erasing LIMIT 1").fetchone() is not None


def hides_user(cur: apsw.Cursor, user: str) -> bool:
    """Whether a forget under way still hides messages of ``user``."""
    return cur.execute(_HIDES_USER, (user,)).fetchone() is not None


def _finish(cur: apsw.Cursor, by: int, effects: Effects, applied: int | None) -> None:
    """The forget at ``by`` has erased its last message and event: what remains to do."""
    if cur.execute(_MACRO_EVENTS, (by,)).fetchone() is not None:
        # From every event applied so far: the calls since the forget are learned too.
        if applied is None:
            applied = int(cur.execute("SELECT coalesce(max(seq), 0) FROM events").get or 0)
        relearn_macros(cur, by, before=applied + 1)
    cur.execute(_EMPTIED, {"by": by})
    cur.execute(_COUNTS, {"by": by})
    event_id = cur.execute("SELECT event_id FROM erasures WHERE seq = ?", (by,)).fetchone()
    ids = [str(r[0]) for r in cur.execute(
        "SELECT message_id FROM erased_messages WHERE erased_by = ?", (by,))]
    effects.erased.append(Erasure(str(event_id[0]) if event_id else "", by, tuple(ids)))
