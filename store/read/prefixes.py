"""Reading the "Always allow" approvals recorded in the database."""

from __future__ import annotations

import apsw

from memq.tenants import DEFAULT


def approved_prefixes(conn: apsw.Connection, tenant: str = DEFAULT) -> dict[str, str | None]:
    """Each prefix approved in ``tenant`` (normal form) with the time it was approved."""
    rows = conn.execute("SELECT prefix, created_at FROM terminal_allowed_prefixes "
                        "WHERE tenant = ? ORDER BY prefix", (tenant,))
    return {str(prefix): None if at is None else str(at) for prefix, at in rows}
