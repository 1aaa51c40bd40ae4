"""Reading the API keys the person minted (``api_keys``)."""

from __future__ import annotations

from dataclasses import dataclass

import apsw
import orjson

from memq.tenants import DEFAULT


@dataclass(frozen=True)
class ApiKey:
    """A key as ``memq keys list`` shows it: never its secret."""

    id: str
    name: str
    users: tuple[str, ...] | None
    """None: every user."""
    agents: tuple[str, ...] | None
    """None: every agent."""
    rights: tuple[str, ...]
    expires_at: str | None
    created_at: str
    revoked_at: str | None
    units_per_s: int | None = None
    """Its own budget per second (None: ``[limits] key_units_per_s``)."""
    concurrent: int | None = None
    """Its own bound on calls at once (None: ``[limits] key_concurrent``)."""
    tenant: str = DEFAULT
    """The tenant whose ids it reaches (:mod:`memq.tenants`); ``users`` and ``agents`` are
    that tenant's."""


_COLUMNS = ("id, name, users, agents, rights, expires_at, created_at, revoked_at, "
            "units_per_s, concurrent, tenant")


def keys(conn: apsw.Connection) -> list[ApiKey]:
    """Every key, newest first."""
    rows = conn.execute(f"SELECT {_COLUMNS} FROM api_keys ORDER BY created_at DESC, id")
    return [_key(row) for row in rows]


def key_with_digest(conn: apsw.Connection, key_id: str) -> tuple[ApiKey, str] | None:
    """One key and the digest of its secret, for the server to check a presented token."""
    row = conn.execute(f"SELECT {_COLUMNS}, secret_sha256 FROM api_keys WHERE id = ?",
                       (key_id,)).fetchone()
    return None if row is None else (_key(row[:-1]), str(row[-1]))


def _key(row: tuple[object, ...]) -> ApiKey:
    (key_id, name, users, agents, rights, expires_at, created_at, revoked_at, units,
     concurrent, tenant) = row
    return ApiKey(str(key_id), str(name), _ids(users), _ids(agents),
                  tuple(orjson.loads(str(rights))), _text(expires_at), str(created_at),
                  _text(revoked_at), _int(units), _int(concurrent), str(tenant))


def _ids(value: object) -> tuple[str, ...] | None:
    return None if value is None else tuple(orjson.loads(str(value)))


def _int(value: object) -> int | None:
    return None if value is None else int(str(value))


def _text(value: object) -> str | None:
    return None if value is None else str(value)
