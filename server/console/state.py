"""What the console's pages and actions share: the person's clients, the logins, and the
answers to a page asked without a session or a call that failed.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field

from fastapi import Request
from fastapi.responses import RedirectResponse, Response

from memq import broker, names
from memq.errors import MemqError
from memq.problems import status_of
from memq.producers.client import MemoryClient
from memq.server.console.logins import Login, Logins
from memq.server.console.render import page
from memq.server.disclosure import disclosed


@dataclass
class Console:
    """The console of one server: it reads and acts with the person's (admin) client."""

    reader: MemoryClient
    """The admin's client of ``memq serve``: every page reads through it."""
    logins: Logins
    actor: MemoryClient = field(init=False)
    """An outbox of the console's own on the admin's credentials: an action waits for
    what it sent, and only for that."""
    acting: threading.Lock = field(default_factory=threading.Lock, init=False)

    def __post_init__(self) -> None:
        self.actor = self.reader.with_own_outbox()

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
    console = console_of(request)
    login = console.logins.read(request.headers.get("cookie", ""))
    if login is None or console.ended(login):
        raise LoginNeeded("sign in with the admin token")
    return login


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
                detail=body["detail"], csrf=login.csrf if login else "", said=None)
