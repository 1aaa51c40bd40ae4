"""The console's pages: each a GET that only reads, rendered on the server.

Memory (tenants, users, their sessions and facts), a session's timeline and why its
context holds what it holds, the approvals with what the matcher says of a typed command,
tasks, rejected events, keys, and the service's health. Every list is a page of a bounded
size, so a page costs the same on a database of a million turns as on a small one.
"""

from __future__ import annotations

from collections import defaultdict
from typing import Any
from urllib.parse import unquote

from fastapi import APIRouter, Depends, Query, Request
from fastapi.responses import HTMLResponse, RedirectResponse, Response

from memq import tenants
from memq.approvals import normalize_prefix
from memq.errors import MemqError, NotFound
from memq.server.console.logins import Login
from memq.server.console.render import page, stylesheet
from memq.server.console.state import Console, console_of, signed_in, told
from memq.store.read import console as shown
from memq.store.read import rejected, status
from memq.store.read.sessions import owner

router = APIRouter(prefix="/ui", include_in_schema=False)
SignedIn = Depends(signed_in)

USERS_SHOWN = 200
SESSIONS_SHOWN = 100
TURNS_SHOWN = 100
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
        by_tenant: dict[str, list[shown.UserRow]] = defaultdict(list)
        for row in shown.users(conn, USERS_SHOWN):
            by_tenant[tenants.split(row.user_id)[0]].append(row)
    sessions = console.reader.sessions(user_id=user, limit=SESSIONS_SHOWN)
    facts = console.reader.facts(user_id=user) if user else []
    return _page(request, login, "memory.html", tenants=dict(sorted(by_tenant.items())),
                 user=user, sessions=sessions, facts=facts, limit=LISTED)


@router.get("/session")
def session(request: Request, id: str, query: str | None = None, scope: str = "session",
            at: str | None = Query(None, max_length=40),
            seq: int | None = Query(None, ge=0, le=2**63 - 1),
            login: Login = SignedIn) -> Response:
    console = console_of(request)
    before = (at, seq) if at is not None and seq is not None else None
    with console.reader.readers.connection() as conn:
        found = owner(conn, id)
        turns = shown.timeline(conn, id, TURNS_SHOWN, before)
    if found is None:
        raise NotFound(f"no session {id!r}")
    explained, why = _explained(console, id, query, scope)
    return _page(request, login, "session.html", session_id=id, owner=found, turns=turns,
                 more=len(turns) == TURNS_SHOWN, query=query, scope=scope,
                 items=explained, why=why, shown_chars=shown.SHOWN_CHARS)


def _explained(console: Console, session_id: str, query: str | None,
               scope: str) -> tuple[list[Any] | None, str | None]:
    """``get_context``'s items for the form's question, or why it could not answer."""
    if query is None:
        return None, None
    try:
        return console.reader.get_context(session_id, query.strip() or None, scope), None
    except MemqError as exc:
        return None, str(exc)


@router.get("/forget")
def forget(request: Request, session: str | None = None, user: str | None = None,
           login: Login = SignedIn) -> Response:
    """The confirmation a forget deserves: the person types what is to be erased."""
    if (session is None) == (user is None):
        raise NotFound("forget a session or a user: name one")
    return _page(request, login, "forget.html", session_id=session, user_id=user)


@router.get("/approvals")
def approvals(request: Request, tenant: str = tenants.DEFAULT, command: str | None = None,
              login: Login = SignedIn) -> Response:
    console = console_of(request)
    prefixes = console.reader.allowed_prefixes(tenant=tenant)
    checked = _checked(console, command, tenant) if command else None
    return _page(request, login, "approvals.html", tenant=tenant, prefixes=prefixes,
                 command=command, checked=checked)


def _checked(console: Console, command: str, tenant: str) -> dict[str, Any]:
    """What the matcher says of ``command``, and what approving it would store."""
    allowed = console.reader.is_command_allowed(command, tenant=tenant)
    try:
        return {"allowed": allowed, "prefix": normalize_prefix(command), "refused": None}
    except MemqError as exc:
        return {"allowed": allowed, "prefix": None, "refused": str(exc)}


@router.get("/tasks")
def tasks(request: Request, login: Login = SignedIn) -> Response:
    return _page(request, login, "tasks.html", tasks=console_of(request).reader.tasks(),
                 limit=LISTED)


@router.get("/rejected")
def rejected_events(request: Request, login: Login = SignedIn) -> Response:
    with console_of(request).reader.readers.connection() as conn:
        rows = rejected.list_rejected(conn, limit=LISTED)
    return _page(request, login, "rejected.html", rows=rows, limit=LISTED)


@router.get("/keys")
def keys(request: Request, login: Login = SignedIn) -> Response:
    listed = console_of(request).reader.api_keys()[:LISTED]
    return _page(request, login, "keys.html", keys=listed, secret=None)


@router.get("/health")
def health(request: Request, login: Login = SignedIn) -> Response:
    console = console_of(request)
    config = console.reader.config
    with told(console, "reading the status"):
        broker = {"inbox": status.inbox(console.reader.redis),
                  "writer": status.writer(console.reader.redis),
                  "workers": console.workers()}
    database = status.database(config.db_path, config.embed.model_name)
    return _page(request, login, "health.html", broker=broker, database=database)


def _page(request: Request, login: Login, template: str, **context: Any) -> HTMLResponse:
    """A signed-in page: the session's CSRF token for its forms, and what the last action
    said (once)."""
    said = request.cookies.get(SAID_COOKIE)
    response = page(template, csrf=login.csrf, said=None if said is None else unquote(said),
                    **context)
    if said is not None:
        response.delete_cookie(SAID_COOKIE, path="/ui")
    return response


SAID_COOKIE = "memq_console_said"
"""What an action said, for the page it leads back to (set by ``actions.py``)."""
