"""What every forget does to the rows it reaches: the statements shared by a forget in one
transaction (store/projections/forgetting.py), one erased in steps
(store/projections/erasure_steps.py) and a retention pass (store/projections/retention.py).

Messages are deleted with their words in the lexical index and their summary links; the
events about them become *tombstones* (the row stays, the payload becomes ``{}`` and
``erased_by`` names the erasing event); ``erased_messages`` keeps their ids, so that a late
result for one of them is tombstoned on arrival (:func:`erased_by`).
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass

import apsw
import orjson

from memq.events import EventType
from memq.store import lexical
from memq.store.effects import Effects
from memq.store.projections.macros import relearn
from memq.store.read.hidden import hides

TOMBSTONE = "{}"
"""The payload a forgotten event keeps."""

_EACH = "(SELECT value FROM json_each(?))"

_TOMBSTONE_SESSIONS = f"""
    UPDATE events SET payload = '{TOMBSTONE}', erased_by = :by
    WHERE session_id IN (SELECT value FROM json_each(:sessions)) AND seq < :by
      AND erased_by IS NULL
    RETURNING seq, type"""
# The expression and WHERE terms of the index events_by_message, word for word. Named:
# without statistics the planner preferred events_by_type, which decodes the payload of
# every embedding event of every user (3x slower for one user among three).
TOMBSTONE_RESULTS = f"""
    UPDATE events INDEXED BY events_by_message SET payload = '{TOMBSTONE}', erased_by = :by
    WHERE json_extract(payload, '$.message_id') IN (SELECT value FROM json_each(:ids))
      AND type IN ('message.embedded', 'message.embedding_failed') AND erased_by IS NULL"""
TOMBSTONE_SEQS = f"""
    UPDATE events SET payload = '{TOMBSTONE}', erased_by = :by
    WHERE seq IN (SELECT value FROM json_each(:seqs)) AND erased_by IS NULL
    RETURNING seq"""
# Rejected entries are raw bytes, maybe not JSON: only those that parse and name what
# goes are deleted.
_REJECTED = """
    DELETE FROM rejected_events WHERE json_valid(CAST(raw AS TEXT)) AND (
        json_extract(CAST(raw AS TEXT), '$.session_id')
            IN (SELECT value FROM json_each(:sessions))
        OR json_extract(CAST(raw AS TEXT), '$.payload.message_id')
            IN (SELECT value FROM json_each(:ids))
        OR (:user IS NOT NULL AND json_extract(CAST(raw AS TEXT), '$.payload.user_id') = :user))"""
# A message a forget is still erasing (store/projections/erasure_steps.py).
_HIDDEN_BY = f"""
    SELECT max(x.by_seq) FROM messages AS m JOIN erasing AS x ON {hides("m")}
    WHERE m.id IN {_EACH}"""


@dataclass(frozen=True)
class Doomed:
    """The messages a forget erases: their ids, their seqs (the lexical index's keys), and
    the condition that selected them, which deletes them too."""

    ids: list[str]
    seqs: list[int]
    where: str
    value: str


def erase(
    cur: apsw.Cursor, sessions: list[str], doomed: Doomed, seq: int, effects: Effects,
    user: str | None = None,
) -> tuple[int, int]:
    """Delete the messages and tombstone the sessions' events logged before ``seq``, with
    the messages' results; returns (messages, events) erased."""
    ids = doomed.ids
    sessions_json, ids_json = json_list(sessions), json_list(ids)
    if ids:
        lexical.unindex(cur, doomed.seqs)
        # With the session: a user's forget replayed on a rebuild finds the sessions it
        # emptied by it (forgetting.py's _DELETE_SESSIONS).
        cur.execute("INSERT OR IGNORE INTO erased_messages (message_id, erased_by, session_id) "
                    f"SELECT id, ?, session_id FROM messages WHERE id IN {_EACH}",
                    (seq, ids_json))
        cur.execute(f"DELETE FROM summary_sources WHERE source_id IN {_EACH} "
                    f"OR summary_id IN {_EACH}", (ids_json, ids_json))
        # By the condition that found them, through its index: the same rows, without a
        # seek per id in the primary key.
        cur.execute(f"DELETE FROM messages WHERE {doomed.where}", (doomed.value,))
    erased: list[tuple[int, str]] = cur.execute(  # type: ignore[assignment]  # by the SQL
        _TOMBSTONE_SESSIONS, {"by": seq, "sessions": sessions_json}).fetchall()
    effects.tombstoned.update(position for position, _ in erased)
    types = Counter(etype for _, etype in erased)
    cur.execute(TOMBSTONE_RESULTS, {"by": seq, "ids": ids_json})
    events = sum(types.values()) + cur.getconnection().changes()
    cur.execute(f"DELETE FROM macro_last_calls WHERE session_id IN {_EACH}", (sessions_json,))
    if types[EventType.MACRO_OBSERVED] or types[EventType.MACRO_USED]:
        events += relearn_macros(cur, seq)
    forget_rejected(cur, sessions, ids, user)
    forget_legacy_rows(cur, sessions, ids)
    if ids:
        drop_pending_embeddings(effects, set(ids))
    return len(ids), events


def erase_messages(cur: apsw.Cursor, ids: list[str], seqs: list[int], by: int,
                   effects: Effects) -> int:
    """One step of a forget erased in steps: these messages, the events that made them
    (by position) and their results; returns how many events went."""
    doomed = Doomed(ids, seqs, f"id IN {_EACH}", json_list(ids))
    _, events = erase(cur, [], doomed, by, effects)
    made = [int(r[0]) for r in cur.execute(TOMBSTONE_SEQS, {"by": by,
                                                            "seqs": json_list(seqs)})]
    effects.tombstoned.update(made)
    return events + len(made)


def relearn_macros(cur: apsw.Cursor, seq: int, before: int | None = None) -> int:
    """Learn the macros again without the forgotten calls (what a rebuild will learn), for
    the erasing event at ``seq`` (a forget, or retention), from the events logged before
    ``before``: by default ``seq`` (those after it in its batch are still to be applied);
    the last step of a forget erased in steps, with more applied since, asks for those.

    A recorded use of a macro that only forgotten calls had taught no longer names one: it
    is tombstoned too. Returns how many such uses were.
    """
    unused: list[int] = []
    relearn(cur, refused=unused.append, before=seq if before is None else before)
    cur.execute(f"UPDATE events SET payload = '{TOMBSTONE}', erased_by = ? "
                f"WHERE seq IN {_EACH}", (seq, json_list(unused)))
    return len(unused)


def forget_rejected(cur: apsw.Cursor, sessions: list[str], ids: list[str],
                    user: str | None) -> None:
    """Delete the rejected entries that name these sessions, messages or user."""
    cur.execute(_REJECTED, {"sessions": json_list(sessions), "ids": json_list(ids),
                            "user": user})


def forget_legacy_rows(cur: apsw.Cursor, sessions: list[str], ids: list[str]) -> None:
    # The seed's messages table is kept, renamed, by the upgrade (store/legacy.py).
    if cur.execute("SELECT 1 FROM sqlite_master WHERE name = 'legacy_messages'").fetchone():
        cur.execute(f"DELETE FROM legacy_messages WHERE session_id IN {_EACH} "
                    f"OR id IN {_EACH}", (json_list(sessions), json_list(ids)))


def drop_pending_embeddings(effects: Effects, ids: set[str]) -> None:
    """Messages appended earlier in this batch must not be sent to the embedder with their
    text once the batch commits: the job would carry what was just forgotten."""
    effects.embed[:] = [(mid, text) for mid, text in effects.embed if mid not in ids]


def json_list(values: list[str] | list[int]) -> str:
    return orjson.dumps(values).decode()


def erased_by(cur: apsw.Cursor, message_ids: list[str]) -> int | None:
    """The forget that erased any of these messages, or is erasing them, if one did (for
    late results: a result about them is tombstoned on arrival)."""
    ids = json_list(message_ids)
    row = cur.execute(
        f"SELECT max(erased_by) FROM erased_messages WHERE message_id IN {_EACH}",
        (ids,)).fetchone()
    if row is None or row[0] is None:
        row = cur.execute(_HIDDEN_BY, (ids,)).fetchone()
    return None if row is None or row[0] is None else int(row[0])


def tombstone(cur: apsw.Cursor, seq: int, by: int, effects: Effects) -> None:
    """Empty one event that arrived about forgotten data (a late result), in the log."""
    cur.execute(f"UPDATE events SET payload = '{TOMBSTONE}', erased_by = ? WHERE seq = ?",
                (by, seq))
    effects.tombstoned.add(seq)
