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

What a key may do (``read``, ``write``, ``forget``) is the operation's right
(:data:`~memq.producers.operations.OPERATIONS`); minting keys is never a key's.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

from memq.errors import NotFound, PermissionDenied
from memq.printable import shown
from memq.producers.client import MemoryClient
from memq.producers.operations import Operation, Right
from memq.server.principals import Grant
from memq.store.read.sessions import Owner, SessionInfo

GLOBAL_WRITES = frozenset({"set_fact", "delete_fact", "put_document", "delete_document",
                           "touch_document"})
"""Calls that change a global fact or document when they name no user."""
TASKS = frozenset({"schedule_task", "pause_task", "resume_task", "delete_task", "task"})


def admit(grant: Grant | None, op: Operation, given: dict[str, Any],
          client: MemoryClient) -> None:
    """Raise unless ``grant`` reaches everything the call names; fills in the user (and
    agent) of a new session's first turn when the key has only one."""
    if grant is None:
        return
    if op.right is Right.ADMIN or op.right.value not in grant.rights:
        raise PermissionDenied(f"this key may not {op.right.value}: {op.name} needs it")
    if grant.everyone:
        return
    if op.name in TASKS and grant.users is not None:
        if op.name == "schedule_task":
            raise PermissionDenied("tasks are every user's: a key limited to some users "
                                   "cannot schedule one")
        raise NotFound(f"no task {shown(given.get('task_id')):.60}")
    if op.name == "get_context" and given.get("scope") == "agent" and grant.users is not None:
        raise PermissionDenied("a key limited to some users searches at session or user "
                               "scope: an agent's sessions are other users' too")
    for turn in given["turns"] if op.name == "append_many" and _turns(given) else (given,):
        _admit_names(grant, op, turn, client)


def _turns(given: Mapping[str, Any]) -> bool:
    turns = given.get("turns")
    return isinstance(turns, list) and all(isinstance(t, dict) for t in turns)


def _admit_names(grant: Grant, op: Operation, given: dict[str, Any],
                 client: MemoryClient) -> None:
    for name, granted in (("user_id", grant.users), ("agent_id", grant.agents)):
        value = given.get(name)
        if value is not None and granted is not None and value not in granted:
            raise NotFound(f"no {name.removesuffix('_id')} {shown(value):.60}")
    if isinstance(given.get("session_id"), str):
        _admit_session(grant, op, given, client.owners.get(given["session_id"]))
    elif op.name in GLOBAL_WRITES and given.get("user_id") is None and grant.users is not None:
        raise PermissionDenied("a key limited to some users changes only their facts and "
                               "documents: name the user_id")


def _admit_session(grant: Grant, op: Operation, given: dict[str, Any],
                   owner: Owner | None) -> None:
    if owner is None or op.name in ("append", "append_many"):
        if op.name not in ("append", "append_many"):
            raise NotFound(f"no session {shown(given['session_id']):.60}")
        _fill(given, "user_id", grant.users)
        _fill(given, "agent_id", grant.agents)
        if owner is None:
            return
    if not granted(grant, owner.user_id, owner.agent_id):
        raise NotFound(f"no session {shown(given['session_id']):.60}")


def _fill(given: dict[str, Any], name: str, granted: frozenset[str] | None) -> None:
    """A key of one user (or agent) appends as that user when the turn names none."""
    if given.get(name) is None and granted is not None:
        if len(granted) != 1:
            raise PermissionDenied(f"this key serves several {name.removesuffix('_id')}s: "
                                   f"name the {name} of the session's first turn")
        (given[name],) = granted


def granted(grant: Grant, user_id: str | None, agent_id: str | None) -> bool:
    return ((grant.users is None or user_id in grant.users)
            and (grant.agents is None or agent_id in grant.agents))


def shown_to(grant: Grant | None, op: Operation, result: Any) -> Any:
    """A list answer cut to what ``grant`` reaches."""
    if grant is None or grant.everyone:
        return result
    cut = FILTERS.get(op.name)
    return result if cut is None else cut(grant, result)


FILTERS: Mapping[str, Callable[[Grant, Any], Any]] = {
    "sessions": lambda grant, found: [s for s in found if isinstance(s, SessionInfo)
                                      and granted(grant, s.user_id, s.agent_id)],
    "tasks": lambda grant, found: found if grant.users is None else [],
}
