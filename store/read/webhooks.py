"""Reading the webhooks the person registered (``webhooks``)."""

from __future__ import annotations

from dataclasses import dataclass

import apsw
import orjson


@dataclass(frozen=True)
class Webhook:
    id: str
    url: str
    types: tuple[str, ...]
    """Event types or shell patterns (``fact.*``) it is sent."""
    user_id: str | None
    """Only this user's changes; None: every change."""
    after: int
    """The position it was added at: it is sent the changes after it."""
    created_at: str
    removed_at: str | None = None
    secret: str | None = None
    """Read only by the dispatcher, which signs with it (never listed)."""
    tenant: str | None = None
    """Only this tenant's changes, in its own names (``user_id`` is one of them); None:
    every change, as stored."""


_COLUMNS = "id, url, types, user_id, after, created_at, removed_at, tenant"


def webhooks(conn: apsw.Connection) -> list[Webhook]:
    """Every webhook, removed ones too, oldest first; never a secret."""
    return [_hook(row) for row in conn.execute(
        f"SELECT {_COLUMNS} FROM webhooks ORDER BY created_at, id")]


def active_with_secrets(conn: apsw.Connection) -> list[Webhook]:
    """The webhooks in force, each with its secret (for the dispatcher)."""
    return [_hook(row[:-1], str(row[-1])) for row in conn.execute(
        f"SELECT {_COLUMNS}, secret FROM webhooks WHERE removed_at IS NULL ORDER BY id")]


def removed_ids(conn: apsw.Connection) -> list[str]:
    """The ids of the webhooks removed (their rows stay, with ``removed_at``)."""
    return [str(r[0]) for r in conn.execute(
        "SELECT id FROM webhooks WHERE removed_at IS NOT NULL ORDER BY id")]


def _hook(row: tuple[object, ...], secret: str | None = None) -> Webhook:
    hook_id, url, types, user_id, after, created_at, removed_at, tenant = row
    return Webhook(str(hook_id), str(url), tuple(orjson.loads(str(types))),
                   None if user_id is None else str(user_id), int(str(after)),
                   str(created_at), None if removed_at is None else str(removed_at), secret,
                   None if tenant is None else str(tenant))
