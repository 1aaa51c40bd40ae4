"""Events sent for an API key: the writer judges each against the key's grant, as
``memq serve`` did before sending it, and records which key it came through.

The second check of the same rule (``server/grants.py`` is the first): a key's event that
reaches another user's session, a user the key does not name, a global fact or document, a
task (every user's) or a macro its users' calls did not teach when the key is limited to
some users, or that needs a right the key lacks, is set aside with the reason. A key
revoked or expired before the event was applied sends nothing more. The key an event came
through is kept beside the log (``event_keys``), for ``memq audit``; forgetting erases the
event's payload, never who sent it or when.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import NamedTuple

import apsw
import orjson

from memq import narrowing, tenants
from memq.events import Event, EventType
from memq.printable import shown
from memq.store.read.macros import owner as macro_owner
from memq.store.read.scope import Owner
from memq.store.write import bulk

FORGETS = frozenset({EventType.SESSION_FORGOTTEN, EventType.MESSAGE_FORGOTTEN,
                     EventType.USER_FORGOTTEN})
TASKS = frozenset({EventType.TASK_SCHEDULED, EventType.TASK_CHANGED, EventType.TASK_DELETED})


Granted = tuple[set[str] | None, set[str] | None, set[str]]
"""Users (None: all), agents (None: all) and rights."""


class _Key(NamedTuple):
    users: set[str] | None
    agents: set[str] | None
    rights: set[str]
    expires_at: str | None
    revoked_at: str | None
    tenant: str


@dataclass
class Reads:
    """What judging a batch's events reads, read once each: valid while nothing the batch
    applies can change a key or a session's owner (the writer's fast path for keys'
    messages, ``store/write/batch.py``). Without it, each event reads its key's row and
    its session's owner again: 32 of one key's turns, 32 times the same rows."""

    keys: dict[str, _Key | None] = field(default_factory=dict)
    owners: dict[str, Owner | None] = field(default_factory=dict)


def refusal(cur: apsw.Cursor, event: Event, key_id: str, narrowed: str | None = None,
            *, reads: Reads | None = None) -> str | None:
    """Why the key (narrowed by a delegated token, if ``narrowed``) may not send
    ``event``, or None. ``reads``: rows already read in this batch (see :class:`Reads`)."""
    reads = Reads() if reads is None else reads
    if key_id not in reads.keys:
        reads.keys[key_id] = _key(cur, key_id)
    key = reads.keys[key_id]
    if key is None:
        return f"sent for key {key_id}, which does not exist"
    if key.revoked_at is not None:
        return f"sent for key {key_id}, revoked at {key.revoked_at}"
    if key.expires_at is not None and key.expires_at <= event.created_at:
        return f"sent for key {key_id}, expired at {key.expires_at}"
    return _granted_refusal(cur, event, key_id, key, narrowed, reads)


def _key(cur: apsw.Cursor, key_id: str) -> _Key | None:
    row = cur.execute("SELECT users, agents, rights, expires_at, revoked_at, tenant "
                      "FROM api_keys WHERE id = ?", (key_id,)).fetchone()
    if row is None:
        return None
    users, agents, rights, expires_at, revoked_at, tenant = row
    return _Key(_ids(users), _ids(agents), set(orjson.loads(rights)), expires_at,
                revoked_at, str(tenant))


def _granted_refusal(cur: apsw.Cursor, event: Event, key_id: str, key: _Key,
                     narrowed: str | None, reads: Reads) -> str | None:
    """Why the event is outside what the (live) key grants, or None."""
    granted: Granted = (key.users, key.agents, key.rights)
    if narrowed is not None:
        try:
            granted = _within(granted, narrowing.decode(narrowed))
        except ValueError as exc:
            return f"sent for key {key_id} with {exc}"
    needed = "forget" if event.type in FORGETS else "write"
    if needed not in granted[2]:
        return f"key {key_id} may not {needed}"
    tenant = key.tenant
    return _other_tenant(cur, event, key_id, tenant) or _outside(
        cur, event, key_id, _inside(tenant, granted[0]), _inside(tenant, granted[1]), reads)


def _other_tenant(cur: apsw.Cursor, event: Event, key_id: str, tenant: str) -> str | None:
    """Why the event reaches beyond the key's tenant (:mod:`memq.tenants`), or None."""
    if event.type.startswith("prefix."):
        return f"{event.type}: approvals are the person's, not key {key_id}'s"
    p = event.payload
    if (tenant != tenants.DEFAULT and event.type.startswith(("fact.", "document."))
            and p.get("user_id") is None):
        return f"{event.type}: the default tenant's global data, outside key {key_id}'s " \
               f"tenant {tenant}"
    for what, value in (("session", event.session_id), ("user", p.get("user_id")),
                        ("agent", p.get("agent_id")), *_names(cur, event)):
        if isinstance(value, str) and tenants.tenant_of(value) != tenant:
            return f"{event.type}: {what} {shown(value):.60} is outside key {key_id}'s " \
                   f"tenant {tenant}"
    return None


def _names(cur: apsw.Cursor, event: Event) -> list[tuple[str, object]]:
    """The tasks' and tools' stored names an event reaches (each names its tenant): the
    ones it carries, and the stored task's or macro's it changes or uses."""
    p = event.payload
    if event.type in TASKS:
        row = cur.execute("SELECT name FROM scheduled_tasks WHERE id = ?",
                          (p.get("task_id"),)).fetchone()
        return [("task", p.get("name")), ("task", None if row is None else row[0])]
    if event.type == EventType.MACRO_OBSERVED:
        return [("tool", p.get("tool"))]
    if event.type == EventType.MACRO_USED:
        row = cur.execute("SELECT trigger_tool FROM macros WHERE id = ?",
                          (p.get("macro_id"),)).fetchone()
        return [("tool", p.get("tool")), ("macro", None if row is None else row[0])]
    return []


def _inside(tenant: str, names: set[str] | None) -> set[str] | None:
    """A grant's names (a tenant's own) as the stored ids they stand for."""
    return None if names is None else {tenants.inside(tenant, n) for n in names}


def _within(key: Granted, token: Granted) -> Granted:
    """A delegated token's grant: what it names of what its key reaches."""
    def both(mine: set[str] | None, its: set[str] | None) -> set[str] | None:
        return its if mine is None else mine if its is None else mine & its
    return both(key[0], token[0]), both(key[1], token[1]), key[2] & token[2]


def _outside(cur: apsw.Cursor, event: Event, key_id: str, users: set[str] | None,
             agents: set[str] | None, reads: Reads) -> str | None:
    if users is None and agents is None:
        return None
    if event.type in TASKS:
        return f"{event.type}: tasks are every user's and agent's, outside key {key_id}'s"
    if event.type == EventType.MACRO_USED:
        return _other_macro(cur, event, key_id, users)
    user, agent, what = _owner(cur, event, reads)
    if what is None:
        return None
    for kind, have, granted in (("user", user, users), ("agent", agent, agents)):
        if granted is not None and have not in granted:
            # The key reads this reason: it learns that the session is not its own, not
            # whose it is.
            held = f"no {kind}," if have is None else f"a {kind}"
            return f"{event.type}: {what} of {held} outside key {key_id}'s grant"
    return None


def _other_macro(cur: apsw.Cursor, event: Event, key_id: str,
                 users: set[str] | None) -> str | None:
    """A key limited to some users uses only the macros its users' calls taught: not the
    tenant's aggregate, nor another user's (the key reads neither)."""
    macro_id = event.payload.get("macro_id")
    if users is None or macro_owner(cur, macro_id) in users:
        return None
    # The same reason for one that does not exist: the key learns nothing of whose it is.
    return f"{event.type}: macro {shown(macro_id):.30} is not one of key {key_id}'s users'"


def _owner(cur: apsw.Cursor, event: Event, reads: Reads
           ) -> tuple[str | None, str | None, str | None]:
    """Whose data the event reaches: (user, agent, what it is), what None when it is
    nobody's (a macro's use, a tool's learned pattern)."""
    p = event.payload
    if event.session_id is not None:
        if event.session_id not in reads.owners:
            found = cur.execute("SELECT user_id, agent_id FROM sessions WHERE session_id = ?",
                                (event.session_id,)).fetchone()
            reads.owners[event.session_id] = None if found is None else Owner(*found)
        owner = reads.owners[event.session_id]
        if owner is not None and owner != Owner(None, None):
            return owner.user_id, owner.agent_id, _session(event.session_id)
        return p.get("user_id"), p.get("agent_id"), _session(event.session_id)
    if "user_id" in p or event.type.startswith(("fact.", "document.")):
        return p.get("user_id"), None, "a global fact or document" if p.get(
            "user_id") is None else "the data"
    return None, None, None


def _session(stored: str) -> str:
    """A session as its key names it: the id inside the key's tenant."""
    return f"session {shown(tenants.split(stored)[1]):.60}"


def _ids(value: object) -> set[str] | None:
    return None if value is None else set(orjson.loads(str(value)))


def record_many(cur: apsw.Cursor, applied: Iterable[tuple[int, str]]) -> None:
    """Record the key of each applied event, given as (its seq in the log, key id)."""
    bulk.insert(cur, "INSERT OR IGNORE INTO event_keys (seq, key_id) "
                     f"SELECT {bulk.select_columns(2)} FROM json_each(?1)", applied)


def record(cur: apsw.Cursor, event_id: str, key_id: str) -> None:
    cur.execute("INSERT OR IGNORE INTO event_keys (seq, key_id) "
                "SELECT seq, ? FROM events WHERE event_id = ?", (key_id, event_id))
