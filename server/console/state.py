"""What the console's pages and actions share: the person's clients, the logins, and the
answers to a page asked without a session or a call that failed.
"""

from __future__ import annotations

import dataclasses
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import cast

from fastapi import Request
from fastapi.responses import RedirectResponse, Response

from memq import broker, names
from memq.errors import MemqError, PermissionDenied
from memq.problems import status_of
from memq.producers.client import MemoryClient
from memq.server.budgets import Budgets
from memq.server.console.logins import Login, Logins
from memq.server.console.render import page
from memq.server.disclosure import disclosed
from memq.server.granted import CALLER, GrantedClient
from memq.server.principals import KeyRing, grant_of


@dataclass
class Console:
    """The console of one server: it reads and acts with the person's (admin) client; a
    key's session reads through the same client, every call admitted against the key's
    grant exactly as the API's (``server/granted.py``)."""

    reader: MemoryClient
    """The admin's client of ``memq serve``: every page reads through it."""
    logins: Logins
    keys: KeyRing
    actor: MemoryClient = field(init=False)
    """An outbox of the console's own on the admin's credentials: an action waits for
    what it sent, and only for that."""
    acting: threading.Lock = field(default_factory=threading.Lock, init=False)
    granted: GrantedClient = field(init=False)

    def __post_init__(self) -> None:
        self.actor = self.reader.with_own_outbox()
        # A key's pages spend its budget as its API calls do: a console session is no way
        # around the key's limits.
        self.granted = GrantedClient(self.reader, self.reader,
                                     budgets=Budgets.configured(self.reader))

    @contextmanager
    def viewing(self, login: Login) -> Iterator[MemoryClient]:
        """The client a page reads through: the person's, or the key's granted view."""
        if login.grant is None:
            yield self.reader
            return
        reset = CALLER.set(login.grant)
        try:
            yield cast(MemoryClient, self.granted)
        finally:
            CALLER.reset(reset)

    def end(self, login: Login) -> None:
        """Sign ``login`` out on every server (its cookie is signed, not stored)."""
        left = max(1, int(login.expires - time.time()) + 1)
        with told(self, "signing out"):
            self.reader.redis.set(names.CONSOLE_ENDED_PREFIX + login.nonce, b"1", ex=left)

    def ended(self, login: Login) -> bool:
        with told(self, "reading the session"):
            return bool(self.reader.redis.exists(names.CONSOLE_ENDED_PREFIX + login.nonce))

    def workers(self) -> int:
        """RQ workers registered (rq's own count, as rq-dashboard shows it)."""
        from rq import Worker

        return int(Worker.count(connection=self.reader.redis))


def console_of(request: Request) -> Console:
    found: Console = request.app.state.console
    return found


class LoginNeeded(MemqError):
    """A console page asked for without a live session: the answer is the login form."""


def signed_in(request: Request) -> Login:
    """The session of a page's request, a key's with its grant as it stands now."""
    console = console_of(request)
    login = console.logins.read(request.headers.get("cookie", ""))
    if login is None or console.ended(login):
        raise LoginNeeded("sign in with the admin token or an API key")
    if login.key_id is None:
        return login
    key = console.keys.live(login.key_id)  # revoked or expired: the session ends with it
    if key is None:
        raise LoginNeeded("this key was revoked or has expired")
    return dataclasses.replace(login, grant=grant_of(key))


def the_persons(login: Login) -> None:
    """Refuse a key's session what only the person may see or do."""
    if login.grant is not None:
        raise PermissionDenied("a key's console reads its own grant: this is the person's "
                               "(sign in with the admin token)")


@contextmanager
def told(console: Console, doing: str) -> Iterator[None]:
    """Redis' errors as memq's (which a page shows as ``disclosed`` allows)."""
    with broker.translated(console.reader.config.redis_url, doing):
        yield


async def login_needed(request: Request, exc: Exception) -> Response:
    if request.method == "GET":
        return RedirectResponse("/ui/login", 303)
    return page("login.html", 401, said="your session ended: sign in again")


async def failed(request: Request, exc: Exception, status: int | None = None) -> Response:
    """A failed call, as a page: what a caller may read of it, never a traceback;
    ``status`` when HTTP's own (405) says it better than the error's."""
    assert isinstance(exc, MemqError)
    body = disclosed(exc, f"{request.method} {request.url.path}")
    console: Console | None = getattr(request.app.state, "console", None)
    login = None if console is None else console.logins.read(request.headers.get("cookie", ""))
    return page("error.html", status or status_of(exc), title=body["title"],
                detail=body["detail"], csrf=login.csrf if login else "", said=None,
                admin=login is not None and login.key_id is None,
                key_id=None if login is None else login.key_id)
