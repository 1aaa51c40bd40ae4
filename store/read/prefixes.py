"""Reading the "Always allow" approvals recorded in the database."""

from __future__ import annotations

import apsw


def approved_prefixes(conn: apsw.Connection) -> dict[str, str | None]:
    """Each approved prefix (normal form) with the time it was approved."""
    rows = conn.execute("SELECT prefix, created_at FROM terminal_allowed_prefixes ORDER BY prefix")
    return {str(prefix): None if at is None else str(at) for prefix, at in rows}
