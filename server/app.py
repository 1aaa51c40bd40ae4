"""The FastAPI application of ``memq serve``: authentication, errors, and the guard.

Every request but the docs carries ``Authorization: Bearer <token>``; the token's role
(:mod:`memq.tokens`) picks the client the request runs on, made with that role's own
Redis credentials: an agent's token can do exactly what an agent's client can, because it
*is* one. Errors are problem details (:mod:`memq.problems`); a fault of the server is a
500 that names nothing of its insides (the traceback goes to the server's log).
"""

from __future__ import annotations

import logging
import secrets
from collections.abc import Callable, Iterable
from contextlib import AbstractContextManager
from typing import Any

import orjson
from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import Response
from fastapi.routing import APIRoute
from starlette.exceptions import HTTPException

from memq.authority import Role
from memq.errors import (
    AuthenticationFailed,
    Busy,
    MemqError,
    NotFound,
    RateLimited,
    ValidationError,
)
from memq.problems import MEDIA_TYPE, problem
from memq.producers.client import MemoryClient
from memq.producers.operations import OPERATIONS, Kind
from memq.server import console, feed
from memq.server.budgets import Budgets
from memq.server.console.logins import Logins
from memq.server.delegation import Delegations
from memq.server.disclosure import disclosed
from memq.server.guard import Guard
from memq.server.principals import KEY_TTL_S, KeyRing, Principals, keys_in
from memq.server.remotes import MAX_REMOTES, MAX_WAITS, Remotes
from memq.server.routes import router
from memq.tokens import Tokens

log = logging.getLogger("memq.serve")

DEFAULT_MAX_BODY_BYTES = 16 * 1024 * 1024
"""Largest request body: a full batch of long turns fits."""

def create_app(
    bases: dict[Role, MemoryClient], tokens: Tokens, *, allowed_hosts: Iterable[str] = (),
    max_body_bytes: int = DEFAULT_MAX_BODY_BYTES, max_remotes: int = MAX_REMOTES,
    max_waits: int = MAX_WAITS, require_keys: bool = False, key_ttl_s: float = KEY_TTL_S,
    delegation_secret: str | None = None,
) -> Guard:
    """The API over ``bases`` (one client per served role), behind its guard; callers
    come with a role's token or an API key (``server/principals.py``)."""
    # No /docs or /redoc: FastAPI's pages load their scripts from a CDN, which would then
    # run on the API's origin. The schema itself stays at /openapi.json.
    api = FastAPI(title="memq", version="1", description=__doc__ or "", docs_url=None,
                  redoc_url=None)
    person = bases.get(Role.ADMIN) or next(iter(bases.values()))
    budgets = Budgets.configured(person)
    api.state.remotes = Remotes(bases, max_remotes, max_waits, budgets)
    readers = next(iter(bases.values())).readers
    # Delegated tokens are checked by any server that shares the secret: memq serve reads it
    # beside the database; without one (a test, one server) they live as long as this app.
    secret = delegation_secret or secrets.token_urlsafe(32)
    principals = Principals(tokens, KeyRing(keys_in(readers), key_ttl_s),
                            Delegations(secret.encode()), require_keys=require_keys)
    api.state.principals = principals
    api.include_router(router)
    api.include_router(feed.router)
    logins = Logins(secret.encode(), lambda: tokens.by_role.get(Role.ADMIN),
                    principals.keys.grant_of)
    served_console = Role.ADMIN in bases
    if served_console:
        console.install(api, bases[Role.ADMIN], logins, principals.keys)
    api.add_exception_handler(MemqError, _memq_error)
    api.add_exception_handler(RequestValidationError, _invalid_request)
    api.add_exception_handler(HTTPException, _http_error)
    api.add_exception_handler(Exception, _server_fault)
    writes = _writes()

    def spent(token: str, path: str) -> str | None:
        try:
            found = principals.principal(token)
        except MemqError:  # Redis away: the call itself meets it, and answers 503
            return None
        if found is None or found.grant is None:
            return None
        if budgets.spent(found.grant):
            return "this key's budget has no room for its calls now; retry in a moment"
        if budgets.queue_full(found.grant) and writes(path):
            return "this key's events fill its queue for the writer; retry in a moment"
        return None

    def paying(token: str) -> AbstractContextManager[None]:
        found = principals.principal(token)
        return budgets.entering(None if found is None else found.grant)

    return Guard(api, allowed_hosts, max_body_bytes, tokens=principals, spent=spent,
                 door=console.door(logins) if served_console else None,
                 holder=principals.holder_of, paying=paying)


def _writes() -> Callable[[str], bool]:
    """Whether a path is a write's (an operation of kind WRITE), for the guard's early
    refusal of a key whose queue is full: asked only then."""
    patterns = [route.path_regex for route in router.routes if isinstance(route, APIRoute)
                and route.name in OPERATIONS and OPERATIONS[route.name].kind is Kind.WRITE]
    return lambda path: any(pattern.match(path) for pattern in patterns)


def on_console(request: Request) -> bool:
    """Whether a request is the console's: its errors are pages, not problem details."""
    return request.url.path == "/ui" or request.url.path.startswith(console.PREFIX)


def _problem(body: dict[str, Any], headers: dict[str, str] | None = None) -> Response:
    return Response(orjson.dumps(body), status_code=body["status"], media_type=MEDIA_TYPE,
                    headers=headers)


async def _memq_error(request: Request, exc: Exception) -> Response:
    assert isinstance(exc, MemqError)
    if on_console(request):
        return await console.failed(request, exc)
    body = disclosed(exc, f"{request.method} {request.url.path}")
    if isinstance(exc, AuthenticationFailed):
        return _problem(body, {"WWW-Authenticate": 'Bearer realm="memq"'})
    if isinstance(exc, (Busy, RateLimited)):
        return _problem(body, {"Retry-After": "1"})
    return _problem(body)


async def _invalid_request(request: Request, exc: Exception) -> Response:
    assert isinstance(exc, RequestValidationError)
    if on_console(request):
        return await console.failed(request, ValidationError(describe(exc.errors())))
    return _problem(problem("ValidationError", 422, describe(exc.errors())))


def describe(errors: Any) -> str:
    """pydantic's errors as one line: where, and what was wrong (never the value sent)."""
    parts = []
    for error in list(errors)[:5]:
        where = ".".join(str(p) for p in error.get("loc", ()) if p != "body") or "body"
        parts.append(f"{where}: {error.get('msg', 'invalid')}")
    more = len(list(errors)) - 5
    return "; ".join(parts) + (f"; and {more} more" if more > 0 else "")


async def _http_error(request: Request, exc: Exception) -> Response:
    assert isinstance(exc, HTTPException)
    name = "NotFound" if exc.status_code == 404 else "ValidationError"
    detail = exc.detail if isinstance(exc.detail, str) else "bad request"
    if exc.status_code == 404:
        detail = f"no such endpoint: {request.method} {request.url.path[:200]}"
    if on_console(request):
        return await console.failed(request, (NotFound if exc.status_code == 404 else
                                              ValidationError)(detail), exc.status_code)
    return _problem(problem(name, exc.status_code, detail), dict(exc.headers or {}))


async def _server_fault(request: Request, exc: Exception) -> Response:
    log.error("%s %s failed", request.method, request.url.path, exc_info=exc)
    return _problem(problem("MemqError", 500, "the server failed; its log says why"))
