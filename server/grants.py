"""What a key may reach, enforced on every call before the client runs it.

Decided from the key's grant (:class:`~memq.server.principals.Grant`), never from what the
caller says of itself. A call is looked at through the arguments it names, by their
names, so every operation of the table is covered the same way:

- ``session_id``: the session's owner (committed, or claimed by this server's own
  appends) must be a granted user and agent. A session that is not granted and one that
  does not exist get the same answer, ``NotFound`` (404), so a key learns nothing of
  what lies outside its grant. An ``append`` to a new session names a granted user (the
  key's only one when it names none).
- ``user_id`` / ``agent_id``: granted, or ``NotFound``. Without one, a fact or document
  call reaches the global ones: readable by any key, changed only by a key of every user.
- Tasks are every user's: a key limited to some users sees none and schedules none.
- ``get_context`` at ``agent`` scope would search other users' sessions of the agent: a
  key limited to some users searches at session or user scope.
- Lists (``sessions``) show only granted sessions.
- Learned tool macros: a key limited to some users reads its users' own rows
  (:func:`as_key`), and a macro id of any other row is ``NotFound``, as one that does not
  exist. A key of every user reads the tenant's aggregate, as a shared token does.

What a key may do (``read``, ``write``, ``forget``) is the operation's right
(:data:`~memq.producers.operations.OPERATIONS`); minting keys is never a key's.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Collection, Mapping
from typing import Any

from memq import tenants
from memq.errors import NotFound, PermissionDenied
from memq.printable import shown
from memq.producers.client import MemoryClient
from memq.producers.macros import MAX_ID
from memq.producers.operations import Operation, Right
from memq.producers.tasks import no_task
from memq.server import tenancy
from memq.server.principals import Grant
from memq.store.read.audit import key_of
from memq.store.read.changes import Change
from memq.store.read.macros import owner as macro_owner
from memq.store.read.sessions import Owner, SessionInfo

GLOBAL_WRITES = frozenset({"set_fact", "delete_fact", "put_document", "delete_document",
                           "touch_document"})
"""Calls that change a global fact or document when they name no user."""
TASKS = frozenset({"schedule_task", "pause_task", "resume_task", "delete_task", "task"})
APPENDS = frozenset({"append", "append_many"})


def admit(grant: Grant | None, op: Operation, given: dict[str, Any],
          client: MemoryClient, claimed: Collection[str] = ()) -> dict[str, Any]:
    """The arguments to run the call with, once ``grant`` is found to reach everything it
    names (raises otherwise): the caller's names mapped into the key's tenant
    (:mod:`memq.server.tenancy`). Fills in the user (and agent) of a new session's first
    turn, and of a sessions list, when the key has only one. ``claimed``: the sessions
    this caller itself started and the writer may not have committed yet (its own turns
    read back at once), in the caller's names."""
    if grant is None:
        return given
    tenancy.refuse_stored_ids(op, given)
    if op.right is Right.ADMIN or op.right.value not in grant.rights:
        raise PermissionDenied(f"this key may not {op.right.value}: {op.name} needs it")
    tenancy.refuse_other_tenants(grant.tenant, op, given, client)
    if op.name == "suggest_next_tools" and client.macro_owners != macro_owners(grant):
        # Closed rather than open: a key's client made without as_key would read the
        # tenant's aggregate, every user's words.
        raise PermissionDenied("this server's client for the key reads other macros than "
                               "the key's")
    if op.name == "wait_forgotten" and _key_of(client, given.get("event_id")) != grant.key_id:
        raise NotFound(f"no forget {shown(given.get('event_id')):.60} sent with this key "
                       "(flush it first)")
    if not grant.everyone:
        _admit_limited(grant, op, given, client, claimed)
    return tenancy.into(grant.tenant, op, given)


def _admit_limited(grant: Grant, op: Operation, given: dict[str, Any],
                   client: MemoryClient, claimed: Collection[str]) -> None:
    _admit_shared(grant, op, given, client)
    owners: dict[str, Owner | None] = {}  # a batch's turns mostly share their session

    def owner_of(session_id: str) -> Owner | None:
        if session_id not in owners:
            stored = client.sources.owner(tenants.inside(grant.tenant, session_id))
            owners[session_id] = tenancy.owner_in(grant.tenant, stored)
        return owners[session_id]

    for turn in _each_call(op, given):
        _admit_names(grant, op, turn, owner_of, claimed)


def as_key(client: MemoryClient, grant: Grant) -> None:
    """Make ``client`` (a key's own, ``with_own_outbox``) act for ``grant``: its events name
    the key, so the writer checks and records it, and its suggestions come from the
    macros its users' calls taught (all the tenant's when it has every user)."""
    client.outbox.acting_for = grant.mark
    client.macro_owners = macro_owners(grant)


def macro_owners(grant: Grant) -> frozenset[str] | None:
    """The stored users whose learned macros ``grant`` reads; None: the aggregate."""
    if grant.users is None:
        return None
    return frozenset(tenants.inside(grant.tenant, user) for user in grant.users)


def _admit_macro(grant: Grant, given: dict[str, Any], client: MemoryClient) -> None:
    """A key limited to some users uses only its users' macros: any other id is answered
    as one that does not exist."""
    macro_id, owners = given.get("macro_id"), macro_owners(grant)
    if owners is None or type(macro_id) is not int or not 1 <= macro_id <= MAX_ID:
        return  # every user's key, or an id the call itself refuses
    with client.readers.connection() as conn:
        if macro_owner(conn, macro_id) not in owners:
            raise NotFound(f"no macro {macro_id}")


def _admit_shared(grant: Grant, op: Operation, given: dict[str, Any],
                  client: MemoryClient) -> None:
    """What is every user's (tasks), what crosses users or agents (scopes, lists, forgets),
    and the learned macros of others."""
    if op.name == "use_macro":
        _admit_macro(grant, given, client)
    if op.name in TASKS:
        if op.name == "schedule_task":
            raise PermissionDenied("tasks are every user's and agent's: a key limited to "
                                   "some cannot schedule one")
        raise NotFound(no_task(given.get('task_id')))
    scope = given.get("scope")
    if op.name == "get_context" and scope == "user" and grant.agents is not None:
        raise PermissionDenied("a key limited to some agents searches at session or agent "
                               "scope: its user's other agents' sessions are not its own")
    if op.name == "sessions":
        _fill(given, "user_id", grant.users, "list sessions")
        _fill(given, "agent_id", grant.agents, "list sessions")


def sessions_named(op: Operation, given: dict[str, Any]) -> list[str]:
    """The sessions an append names (each turn's, for a batch)."""
    return [t["session_id"] for t in _each_call(op, given)
            if isinstance(t.get("session_id"), str)]


def _each_call(op: Operation, given: dict[str, Any]) -> list[dict[str, Any]]:
    """A batch's turns, each judged as an append of its own; any other call, itself."""
    turns = given.get("turns")
    if op.name == "append_many" and isinstance(turns, list) and all(
            isinstance(t, dict) for t in turns):
        return turns
    return [given]


def _admit_names(grant: Grant, op: Operation, given: dict[str, Any],
                 owner_of: Callable[[str], Owner | None], claimed: Collection[str]) -> None:
    for name, granted in (("user_id", grant.users), ("agent_id", grant.agents)):
        value = given.get(name)
        if value is not None and granted is not None and value not in granted:
            raise NotFound(f"no {name.removesuffix('_id')} {shown(value):.60}")
    session_id = given.get("session_id")
    if isinstance(session_id, str):
        # The committed owner, read afresh: a client's cache may hold a claim that was
        # never sent, or that the writer refused, and must not decide what a key reaches.
        owner = owner_of(session_id)
        _admit_session(grant, op, given, owner, session_id in claimed)
    elif op.name in GLOBAL_WRITES and given.get("user_id") is None and grant.users is not None:
        raise PermissionDenied("a key limited to some users changes only their facts and "
                               "documents: name the user_id")


def _admit_session(grant: Grant, op: Operation, given: dict[str, Any],
                   owner: Owner | None, its_own: bool) -> None:
    if op.name in APPENDS:
        _fill(given, "user_id", grant.users, "start a session")
        _fill(given, "agent_id", grant.agents, "start a session")
    if owner is None:
        if op.name in APPENDS or its_own:
            return  # new: the writer fixes its owner with the first turn it commits
        raise NotFound(f"no session {shown(given['session_id']):.60}")
    if not granted(grant, owner.user_id, owner.agent_id):
        raise NotFound(f"no session {shown(given['session_id']):.60}")


def _fill(given: dict[str, Any], name: str, granted: frozenset[str] | None,
          doing: str) -> None:
    """A key of one user (or agent) acts as that user when the call names none."""
    if given.get(name) is None and granted is not None:
        if len(granted) != 1:
            raise PermissionDenied(f"this key serves several {name.removesuffix('_id')}s: "
                                   f"name the {name} to {doing}")
        (given[name],) = granted


def _key_of(client: MemoryClient, event_id: Any) -> str | None:
    if not isinstance(event_id, str):
        return None
    with client.readers.connection() as conn:
        return key_of(conn, event_id)


def granted(grant: Grant, user_id: str | None, agent_id: str | None) -> bool:
    return ((grant.users is None or user_id in grant.users)
            and (grant.agents is None or agent_id in grant.agents))


def shown_to(grant: Grant | None, op: Operation, result: Any) -> Any:
    """An answer in the key's tenant's names, a list cut to what ``grant`` reaches."""
    if grant is None:
        return result
    result = tenancy.out_of(grant.tenant, op, result)
    if grant.everyone:
        return result
    cut = FILTERS.get(op.name)
    return result if cut is None else cut(grant, result)


FILTERS: Mapping[str, Callable[[Grant, Any], Any]] = {
    "sessions": lambda grant, found: [s for s in found if isinstance(s, SessionInfo)
                                      and granted(grant, s.user_id, s.agent_id)],
    "tasks": lambda grant, found: [],  # every user's and agent's: a limited key's none
    "changes_page": lambda grant, page: dataclasses.replace(page, changes=[
        c for c in page.changes if _in_grant(grant, c)]),
}


def _in_grant(grant: Grant, change: Change) -> bool:
    """A change a key limited to some users sees: its users' data, and the global facts
    and documents it may read (never a task's, an approval's or a macro's)."""
    if change.user_id is None:
        return change.session_id is None and change.type.startswith(("fact.", "document."))
    return granted(grant, change.user_id, change.agent_id)
