"""The console's pages: each a GET that only reads, rendered on the server.

Memory (tenants, users, their sessions and facts), a session's timeline and why its
context holds what it holds, the approvals with what the matcher says of a typed command,
tasks, rejected events, keys, and the service's health. Every list is a page of a bounded
size, so a page costs the same on a database of a million turns as on a small one.
"""

from __future__ import annotations

import dataclasses
from collections import defaultdict
from typing import Any
from urllib.parse import unquote

from fastapi import APIRouter, Depends, Query, Request
from fastapi.responses import HTMLResponse, RedirectResponse, Response

from memq import tenants
from memq.approvals import normalize_prefix
from memq.errors import MemqError, NotFound
from memq.producers.client import MemoryClient
from memq.server import tenancy
from memq.server.console.logins import Login
from memq.server.console.render import page, stylesheet
from memq.server.console.state import Console, console_of, signed_in, the_persons, told
from memq.server.principals import Grant
from memq.store.read import console as shown
from memq.store.read import rejected, status
from memq.store.read.sessions import owner

router = APIRouter(prefix="/ui", include_in_schema=False)
SignedIn = Depends(signed_in)

USERS_SHOWN = 200
SESSIONS_SHOWN = 100
TURNS_SHOWN = 100
AGENTS_LISTED = 20
DOCUMENTS_SHOWN = 50
LISTED = 200
"""Facts, tasks, rejected events and keys shown at most (the CLI lists them all)."""


@router.get("")
def home() -> Response:
    return RedirectResponse("/ui/memory", 303)


@router.get("/static/console.css")
def css() -> Response:
    return Response(stylesheet(), media_type="text/css",
                    headers={"Cache-Control": "max-age=3600"})


@router.get("/memory")
def memory(request: Request, user: str | None = None, login: Login = SignedIn) -> Response:
    console = console_of(request)
    with console.reader.readers.connection() as conn:
        rows = _users(conn, login.grant)
    by_tenant: dict[str, list[shown.UserRow]] = defaultdict(list)
    for row in rows:
        by_tenant[tenants.split(row.user_id)[0]].append(
            row if login.grant is None else dataclasses.replace(
                row, user_id=tenants.split(row.user_id)[1]))  # a key's own names
    with console.viewing(login) as client:
        sessions = _sessions(client, login.grant, user)
        facts = client.facts(user_id=user) if user else []
        documents = client.search_documents(user_id=user, limit=DOCUMENTS_SHOWN) if user \
            else []
    return signed_page(request, login, "memory.html", tenants=dict(sorted(by_tenant.items())),
                       user=user, sessions=sessions, facts=facts, limit=LISTED,
                       documents=[found.document for found in documents],
                       documents_shown=DOCUMENTS_SHOWN)


@router.get("/fact")
def fact(request: Request, category: str, key: str, user: str | None = None,
         login: Login = SignedIn) -> Response:
    """One fact's every change: who made it, when, and when each value was true."""
    with console_of(request).viewing(login) as client:
        changes = client.fact_history(category, key, user_id=user)
    return signed_page(request, login, "fact.html", category=category, key=key, user=user,
                       changes=changes)


def _sessions(client: MemoryClient, grant: Grant | None,
              user: str | None) -> list[Any] | None:
    """The user's sessions, or the most recent. The API lists one user's and one agent's
    at a time for a key of several: a key of several agents gets each of its agents'
    (the first :data:`AGENTS_LISTED`), one of several users None until it names one."""
    if grant is None:
        return client.sessions(user_id=user, limit=SESSIONS_SHOWN)
    if user is None and grant.users is not None and len(grant.users) > 1:
        return None
    agents: list[str | None] = [None]  # the key's one agent, or every agent
    if grant.agents is not None and len(grant.agents) > 1:
        agents = [*sorted(grant.agents)[:AGENTS_LISTED]]
    found = [s for agent in agents
             for s in client.sessions(user_id=user, agent_id=agent, limit=SESSIONS_SHOWN)]
    found.sort(key=lambda s: (s.last_active_at, s.session_id), reverse=True)
    return found[:SESSIONS_SHOWN]


def _users(conn: Any, grant: Grant | None) -> list[shown.UserRow]:
    """The users a viewer sees: every tenant's for the person, a key's own else."""
    if grant is None:
        return shown.users(conn, USERS_SHOWN)

    def stored(names: frozenset[str] | None) -> list[str] | None:
        return None if names is None else [tenants.inside(grant.tenant, n) for n in names]

    return shown.users(conn, USERS_SHOWN, tenant=grant.tenant, among=stored(grant.users),
                       agents=stored(grant.agents))


@router.get("/session")
def session(request: Request, id: str, query: str | None = None, scope: str = "session",
            at: str | None = Query(None, max_length=40),
            seq: int | None = Query(None, ge=0, le=2**63 - 1),
            login: Login = SignedIn) -> Response:
    console = console_of(request)
    before = (at, seq) if at is not None and seq is not None else None
    stored = _readable_session(console, login, id)
    with console.reader.readers.connection() as conn:
        found = owner(conn, stored)
        turns = shown.timeline(conn, stored, TURNS_SHOWN, before)
    if found is None:
        raise NotFound(f"no session {id!r}")
    if login.grant is not None:
        found = tenancy.owner_in(login.grant.tenant, found) or found  # in the key's names
    explained, why = _explained(console, login, id, query, scope)
    return signed_page(request, login, "session.html", session_id=id, owner=found, turns=turns,
                       more=len(turns) == TURNS_SHOWN, query=query, scope=scope,
                       items=explained, why=why, shown_chars=shown.SHOWN_CHARS)


def _readable_session(console: Console, login: Login, session_id: str) -> str:
    """The stored id of a session the viewer may read; NotFound, as the API answers,
    for one outside a key's grant."""
    if login.grant is None:
        return session_id
    with console.viewing(login) as client:
        client.history(session_id, limit=1)  # admitted against the grant, or NotFound
    return tenants.inside(login.grant.tenant, session_id)


def _explained(console: Console, login: Login, session_id: str, query: str | None,
               scope: str) -> tuple[list[Any] | None, str | None]:
    """``get_context``'s items for the form's question, or why it could not answer."""
    if query is None:
        return None, None
    try:
        with console.viewing(login) as client:
            return client.get_context(session_id, query.strip() or None, scope), None
    except MemqError as exc:
        return None, str(exc)


@router.get("/forget")
def forget(request: Request, session: str | None = None, user: str | None = None,
           login: Login = SignedIn) -> Response:
    """The confirmation a forget deserves: the person types what is to be erased."""
    the_persons(login)
    if (session is None) == (user is None):
        raise NotFound("forget a session or a user: name one")
    return signed_page(request, login, "forget.html", session_id=session, user_id=user)


@router.get("/approvals")
def approvals(request: Request, tenant: str | None = None, command: str | None = None,
              login: Login = SignedIn) -> Response:
    console = console_of(request)
    if login.grant is not None:
        tenant = None  # a key's own tenant, whatever the page was asked for
    with console.viewing(login) as client:
        prefixes = client.allowed_prefixes(tenant=tenant)
        checked = _checked(client, command, tenant) if command else None
    shown_tenant = login.grant.tenant if login.grant else tenant or tenants.DEFAULT
    return signed_page(request, login, "approvals.html", tenant=shown_tenant,
                       prefixes=prefixes, command=command, checked=checked)


def _checked(client: MemoryClient, command: str, tenant: str | None) -> dict[str, Any]:
    """What the matcher says of ``command``, and what approving it would store."""
    allowed = client.is_command_allowed(command, tenant=tenant)
    try:
        return {"allowed": allowed, "prefix": normalize_prefix(command), "refused": None}
    except MemqError as exc:
        return {"allowed": allowed, "prefix": None, "refused": str(exc)}


@router.get("/tasks")
def tasks(request: Request, login: Login = SignedIn) -> Response:
    console = console_of(request)
    with console.viewing(login) as client:
        found = client.tasks()
    return signed_page(request, login, "tasks.html", tasks=found, limit=LISTED)


@router.get("/rejected")
def rejected_events(request: Request, login: Login = SignedIn) -> Response:
    the_persons(login)
    with console_of(request).reader.readers.connection() as conn:
        rows = rejected.list_rejected(conn, limit=LISTED)
    return signed_page(request, login, "rejected.html", rows=rows, limit=LISTED)


@router.get("/keys")
def keys(request: Request, login: Login = SignedIn) -> Response:
    the_persons(login)
    listed = console_of(request).reader.api_keys()[:LISTED]
    return signed_page(request, login, "keys.html", keys=listed, secret=None)


@router.get("/health")
def health(request: Request, login: Login = SignedIn) -> Response:
    the_persons(login)
    console = console_of(request)
    config = console.reader.config
    with told(console, "reading the status"):
        broker = {"inbox": status.inbox(console.reader.redis),
                  "writer": status.writer(console.reader.redis),
                  "replication": status.replication(console.reader.redis),
                  "workers": console.workers()}
    database = status.database(config.db_path, config.embed.model_name)
    return signed_page(request, login, "health.html", broker=broker, database=database)


def signed_page(request: Request, login: Login, template: str, *, said: str | None = None,
                **context: Any) -> HTMLResponse:
    """A signed-in page: the session's CSRF token for its forms, who is reading, and
    what the last action said (once)."""
    grant = login.grant
    told_before = request.cookies.get(SAID_COOKIE)
    if said is None and told_before is not None:
        said = unquote(told_before)
    response = page(template, csrf=login.csrf, said=said, admin=grant is None,
                    key_id=login.key_id,
                    tenant_of=lambda stored: grant.tenant if grant else (
                        tenants.split(stored)[0] if stored else ""), **context)
    if told_before is not None:
        response.delete_cookie(SAID_COOKIE, path="/ui")
    return response


SAID_COOKIE = "memq_console_said"
"""What an action said, for the page it leads back to (set by ``actions.py``)."""
