"""Reading the database's own identity (see migration 0015 and ``memq/identity.py``)."""

from __future__ import annotations

import apsw


def database_id(conn: apsw.Connection) -> str | None:
    """The random id this database was given when it was created (None before 0015)."""
    if not conn.execute(_HAS_TABLE).fetchone():
        return None
    row = conn.execute("SELECT id FROM database_identity").fetchone()
    return None if row is None else str(row[0])


_HAS_TABLE = "SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = 'database_identity'"
