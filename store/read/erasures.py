"""Reading the record of forgets (``erasures``, written by store/projections/forgetting.py).

A process that caches what it read (vectors, who owns a session) asks :func:`latest` on
each ``get_context``: one lookup of the largest key. When it moved, something was forgotten
since, and the caches are dropped.
"""

from __future__ import annotations

import apsw

_LATEST = "SELECT ifnull(max(seq), 0) FROM erasures"


def latest(conn: apsw.Connection) -> int:
    """The log position of the last forget committed (0: none yet)."""
    value: int = conn.execute(_LATEST).get
    return value


def event_type(conn: apsw.Connection, event_id: str) -> str | None:
    """The type of the committed event ``event_id`` (None: no such event committed)."""
    row = conn.execute("SELECT type FROM events WHERE event_id = ?", (event_id,)).fetchone()
    return None if row is None else str(row[0])
