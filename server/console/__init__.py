"""The console at ``/ui``: the person's view of what agents remember, and their actions.

Server-rendered pages from the package's own templates and stylesheet (no script, no
CDN, no build step). Signed in with the admin token into an ``HttpOnly``,
``SameSite=Strict`` cookie (``logins.py``); every change is a POST with the session's CSRF
token (``actions.py``), made through the person's client; every page only reads
(``pages.py``). The guard in front of the API checks the session before a form's body is
read, as it checks a bearer token (:func:`door`).
"""

from __future__ import annotations

import asyncio

from fastapi import FastAPI

from memq.producers.client import MemoryClient
from memq.server.console import actions, pages
from memq.server.console.logins import Logins
from memq.server.console.state import Console, LoginNeeded, failed, login_needed
from memq.server.guard import Door, Gate
from memq.server.principals import KeyRing

PREFIX = "/ui/"
LOGIN_PATH = "/ui/login"
LOGIN_BYTES = 4096
LOGIN_PLACES = 8
LOGIN_TIMEOUT_S = 2.0
"""A login form's body: a token and little else, read before anyone is known, so in places
of its own (never the API's) and quickly: one arrives in a single packet."""
FORM_GATE = Gate(1024 * 1024)
"""A signed-in form's body (a fact's value, a command, a key's grant), in the places of
every authenticated body."""


def install(api: FastAPI, person: MemoryClient, logins: Logins, keys: KeyRing) -> None:
    """Serve the console on ``api``, reading and acting through ``person`` (admin); a
    key's session reads what ``keys`` says its grant reaches."""
    api.state.console = Console(person, logins, keys)
    api.include_router(pages.router)
    api.include_router(actions.router)
    api.add_exception_handler(LoginNeeded, login_needed)


def door(logins: Logins) -> Door:
    """For the guard: how a request to the console sends its body without a bearer token
    (the login form; a form of a signed session), else None. The signature alone is
    checked here, in the event loop; a page checks the session is not ended."""
    # Per server: a semaphore belongs to the event loop that first waits on it.
    login = Gate(LOGIN_BYTES, asyncio.Semaphore(LOGIN_PLACES), timeout_s=LOGIN_TIMEOUT_S)

    def admitted(path: str, headers: dict[str, str]) -> Gate | None:
        if path == LOGIN_PATH:
            return login
        if path.startswith(PREFIX) and logins.read(headers.get("cookie", "")) is not None:
            return FORM_GATE
        return None
    return admitted


__all__ = ["door", "failed", "install"]
