"""Reading the change feed: the committed events after a position, in commit order.

A change is one event of the log as a follower sees it: its position (the log's ``seq``),
its type, whose data it touched (the session's owner, or the user the payload names) and
its payload, which is None once a forget erased it: the feed never shows what was
forgotten, and shows the forget itself as a change of its own.

Positions only grow, and every position up to the newest is in the log but those
retention deleted (the events of old forgets); ``feed_horizon`` keeps the highest of these,
so a follower behind it learns that it missed some (:func:`horizon`).
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from fnmatch import fnmatchcase
from typing import Any

import apsw
import orjson

from memq import tenants
from memq.store.read.hidden import hides, visible

MAX_PAGE = 1000
"""Most events one page reads."""


@dataclass(frozen=True)
class Change:
    position: int
    """The event's place in the log: the next page starts after it."""
    id: str
    """The event's id (the same on every replay of the feed)."""
    type: str
    created_at: str
    session_id: str | None
    user_id: str | None
    """Whose data it touched: the session's user, or the user its payload names."""
    agent_id: str | None
    data: dict[str, Any] | None
    """The event's payload; None once it was forgotten."""
    version: int = 1
    """The payload's schema version (``memq.events``)."""


_RESULT = "e.session_id IS NULL AND e.type IN ('message.embedded', 'message.embedding_failed')"
_PAGE = f"""
    SELECT e.seq, e.event_id, e.type, e.created_at, coalesce(e.session_id, m.session_id),
           e.payload, coalesce(e.erased_by, (
               SELECT x.by_seq FROM erasing AS x WHERE {hides("e")} LIMIT 1), (
               SELECT x.by_seq FROM messages AS h JOIN erasing AS x ON {hides("h")}
               WHERE {_RESULT} AND h.id = json_extract(e.payload, '$.message_id') LIMIT 1)),
           coalesce(s.user_id, m.user_id, f.user_id), coalesce(s.agent_id, m.agent_id),
           e.version
    FROM events AS e
    LEFT JOIN sessions AS s ON s.session_id = e.session_id
    LEFT JOIN messages AS m ON {_RESULT}
        AND m.id = json_extract(e.payload, '$.message_id') AND {visible("m")}
    LEFT JOIN erasures AS f ON f.seq = e.seq
    WHERE e.seq > :after ORDER BY e.seq LIMIT :limit"""
"""A change's owner: its session's; an embedding result's, its message's; a forget's, the
one its erasure recorded (the session's row went with it). An event a big forget is still
erasing (``erasing``, store/read/hidden.py), or a result for a message it hides, shows
as erased already, and as nobody's, as once they are gone."""


def page(conn: apsw.Connection, after: int, limit: int) -> tuple[list[Change], int]:
    """Up to ``limit`` changes after ``after``, and the position the page reached (the
    last it read, or ``after``)."""
    found = [_change(row) for row in conn.execute(_PAGE, {"after": after, "limit": limit})]
    return found, found[-1].position if found else after


def _change(row: tuple[Any, ...]) -> Change:
    seq, event_id, etype, created_at, session_id, payload, erased_by, user, agent, version = row
    data = None if erased_by is not None else orjson.loads(payload)
    if user is None and session_id is None and isinstance(data, dict):
        user = data.get("user_id") if isinstance(data.get("user_id"), str) else None
    return Change(int(seq), str(event_id), str(etype), str(created_at), session_id, user,
                  agent, data, int(version))


def newest(conn: apsw.Connection) -> int:
    """The position of the newest committed change (0 for an empty log)."""
    return int(conn.execute("SELECT coalesce(max(seq), 0) FROM events").get or 0)


def horizon(conn: apsw.Connection) -> int:
    """The highest position retention deleted: a follower must be at it or past it."""
    found = conn.execute("SELECT seq FROM feed_horizon WHERE id = 1").fetchone()
    return 0 if found is None else int(found[0])


def matches(change: Change, types: tuple[str, ...] | None) -> bool:
    """Whether a change's type is one of ``types`` (shell patterns: ``fact.*``)."""
    return types is None or any(fnmatchcase(change.type, t) for t in types)


NOBODYS = ("task.", "macro.", "fact.", "document.")
"""Changes that may name no session and no user: the default tenant's global facts and
documents, and its tasks and macros logged before tenants (an approval names its tenant,
a task or macro since then its name). Any other change of nobody (a result for a message
since forgotten) is no tenant's."""
_IDS = ("session_id", "user_id", "agent_id")
_OWN_NAMES = {"task.": "name", "macro.": "tool"}
"""Per kind of change, the field of its data that is a name inside its tenant (a task's
or a tool's stored name); events logged before tenants carry none: the default's."""


def in_tenant(tenant: str, change: Change) -> Change | None:
    """``change`` as ``tenant`` sees it (:mod:`memq.tenants`): in the tenant's own names,
    its data's user and agent too; None if it is not the tenant's, or names another's."""
    if change.session_id is None and change.user_id is None:
        return _nobodys_in(tenant, change)
    named = {k: tenants.name_in(tenant, getattr(change, k)) for k in _IDS
             if isinstance(getattr(change, k), str)}
    data = change.data
    fields = (*_IDS[1:], _OWN_NAMES.get(_kind(change), ""))
    named_data = {} if data is None else {k: tenants.name_in(tenant, data[k]) for k in fields
                                          if isinstance(data.get(k), str)}
    if None in named.values() or None in named_data.values():
        return None
    ids = _users(named)
    return replace(change, session_id=ids.get("session_id"), user_id=ids.get("user_id"),
                   agent_id=ids.get("agent_id"),
                   data=None if data is None else {**data, **_users(named_data)})


def _nobodys_in(tenant: str, change: Change) -> Change | None:
    """A change of no session and no user: an approval names its tenant, a task or a macro
    its name (none, logged before tenants: the default's)."""
    data = change.data or {}
    own = _OWN_NAMES.get(_kind(change))
    if own is not None and change.data is None:
        return None  # erased with its name: whose it was is no longer known, so no key's
    if change.type.startswith("prefix."):
        mine = data.get("tenant", tenants.DEFAULT) == tenant
    elif own is not None and isinstance(data.get(own), str):
        name = tenants.name_in(tenant, data[own])
        return None if name is None else replace(change, data={**data, own: name})
    else:
        mine = tenant == tenants.DEFAULT and change.type.startswith(NOBODYS)
    return change if mine else None


def _kind(change: Change) -> str:
    return change.type.partition(".")[0] + "."


def _users(named: dict[str, str | None]) -> dict[str, str | None]:
    """A tenant's own pseudo-user (its global data) is nobody in its names."""
    return {k: None if k == "user_id" and v == "" else v for k, v in named.items()}
