"""Events the writer could not apply, set aside with their reason for an operator.

``memq rejected list`` and the console show them (``store/read/rejected.py``); a replay
(``memq.rejections.replay``) sends the raw entry through the inbox stream it came from again
(for example after upgrading a writer that did not know its version): a replay is judged
with its sender's rights, never with the operator's.
"""

from __future__ import annotations

import apsw

from memq.printable import bounded

MAX_REASON_CHARS = 500
"""Reasons quote what they refuse, and that is the sender's input: they are cut to this,
with controls escaped (``memq rejected list`` prints them)."""


def bounded_reason(reason: str) -> str:
    return bounded(reason, MAX_REASON_CHARS)


def record(
    cur: apsw.Cursor, stream: str, stream_id: str, raw: bytes, reason: str, now: str,
    replay_of: int | None,
) -> None:
    """Set an entry aside; a replay that fails again updates its original row.

    A replay names its row, and only an entry of the row's own stream may update it: one
    role cannot rewrite the record of what another sent.
    """
    reason = bounded_reason(reason)
    if replay_of is not None:
        cur.execute(
            """UPDATE rejected_events SET reason = ?, attempts = attempts + 1,
                   rejected_at = ?, replayed_at = NULL WHERE id = ? AND stream = ?""",
            (reason, now, replay_of, stream),
        )
        if cur.getconnection().changes():
            return
    cur.execute(
        """INSERT INTO rejected_events (stream, stream_id, raw, reason, rejected_at)
           VALUES (?, ?, ?, ?, ?)""",
        (stream, stream_id, raw, reason, now),
    )


def mark_replayed(cur: apsw.Cursor, rejected_id: int, stream: str, now: str) -> None:
    cur.execute("UPDATE rejected_events SET replayed_at = ? WHERE id = ? AND stream = ?",
                (now, rejected_id, stream))
