"""The change feed over HTTP: ``POST /v1/changes/page`` (one page, as the clients read it)
and ``GET /v1/changes`` (server-sent events).

Each event of the stream is one change: ``id`` its position, ``event`` its type, ``data``
the change as JSON. A follower that reconnects sends the last ``id`` it handled as
``Last-Event-ID`` (as browsers' ``EventSource`` does) or ``?after=``, and the stream goes
on from there, in commit order, each change once. Every page is admitted against the
caller's key, cut to its grant and tenant, and counted in its budget. An open feed (a
stream, or a page waiting for a commit) is one of its key's running calls for as long as
it is open, so a key has at most ``key_concurrent`` (its own bound) open at once; the
next is refused with 429 before its first look. The caller's token
is read again before each page, so a revoked or expired key's stream ends within a page's
wait. An error before the first byte is a problem details answer (404, 410 with the
``horizon``, 422); after it, an ``error`` event, and the stream ends.

Waiting for a commit holds no thread: each look at the log is a quick read in the
server's thread pool, and between looks the wait is asynchronous, every 10 ms at first,
then less often (up to every 200 ms) while nothing comes. A thousand idle followers cost
the server a few thousand quick reads a second and no thread each.
"""

from __future__ import annotations

import asyncio
import re
import time
from collections.abc import AsyncIterator
from contextlib import AsyncExitStack, asynccontextmanager, nullcontext
from typing import Any

import anyio
import orjson
from fastapi import APIRouter, Depends, Query, Request
from fastapi.responses import Response, StreamingResponse
from starlette.concurrency import run_in_threadpool
from starlette.types import Receive, Scope, Send

from memq.errors import AuthenticationFailed, MemqError, ValidationError
from memq.problems import from_error
from memq.producers.changes import MAX_WAIT_S, ChangesPage, bounded
from memq.producers.operations import OPERATIONS
from memq.server import bodies, grants
from memq.server.principals import Principals
from memq.server.remotes import Remote, caller
from memq.server.routes import PROBLEMS, PaidAtTheDoor, answer

router = APIRouter(prefix="/v1")
POSITION = re.compile(r"[0-9]{1,18}")
"""A position as the feed sends it (``str.isdigit`` would take '²', which ``int`` refuses)."""
PAGE = 200
WAIT_S = 10.0
"""How long one page waits for a commit; a comment line keeps the stream alive after."""


FIRST_POLL_S = 0.01
LAST_POLL_S = 0.2
OP = OPERATIONS["changes_page"]
PageBody = bodies.body_model(OP)


@router.post("/changes/page", response_model=dict[str, Any], responses=PROBLEMS)
async def page(asked: PageBody, remote: Remote = Depends(caller),  # type: ignore[valid-type]  # noqa: B008
               paid: int = PaidAtTheDoor) -> Response:
    """One page of the feed after ``after``, waiting up to ``wait`` s for a commit."""
    given = asked.model_dump()  # type: ignore[attr-defined]
    wait = bounded("wait", given.pop("wait"), 0, MAX_WAIT_S)
    # Paid at the door, the page's look is paid and its place held until it is answered.
    async with nullcontext() if paid else _open(remote):
        return answer({OP.answer: await _waited(remote, given, wait, spend=not paid)})


@router.get("/changes", responses=PROBLEMS, response_class=StreamingResponse)
async def follow(request: Request, after: int | None = None,
                 types: list[str] | None = Query(default=None),  # noqa: B008 (FastAPI's way)
                 user_id: str | None = None, remote: Remote = Depends(caller),  # noqa: B008
                 ) -> StreamingResponse:
    """Committed changes after ``after`` (or ``Last-Event-ID``), as server-sent events."""
    given = {"after": _start(after, request.headers.get("last-event-id")), "types": types,
             "user_id": user_id, "limit": PAGE}
    held = AsyncExitStack()
    await held.enter_async_context(_open(remote))  # past the key's bound: 429
    try:
        first = await run_in_threadpool(_page, remote, given, True)  # errors: the status
    except BaseException:
        await held.aclose()
        raise
    token = request.headers.get("authorization", "").partition(" ")[2].strip()
    return _Held(held, _events(request, token, remote, given, first),
                 media_type="text/event-stream", headers={"cache-control": "no-store"})


@asynccontextmanager
async def _open(remote: Remote) -> AsyncIterator[None]:
    """One of the caller's key's running calls, held while its feed is open."""
    budgets = remote.budgets
    held = budgets.holding(remote.grant) if budgets else nullcontext()
    await run_in_threadpool(held.__enter__)
    try:
        yield
    finally:
        with anyio.CancelScope(shield=True):  # given back even when the caller went away
            await run_in_threadpool(held.__exit__, None, None, None)


class _Held(StreamingResponse):
    """A stream that gives back what it holds once it ends, however it ends: finished,
    failed, or its caller gone before its first byte (its generator never started, so
    its own ``finally`` would never run)."""

    def __init__(self, held: AsyncExitStack, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.held = held

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        try:
            await super().__call__(scope, receive, send)
        finally:
            await self.held.aclose()


def _start(after: int | None, last_event_id: str | None) -> int | None:
    if last_event_id is None:
        return after
    if POSITION.fullmatch(last_event_id) is None:
        raise ValidationError(f"Last-Event-ID must be a position the feed sent, got "
                              f"{last_event_id[:40]!r}")
    return int(last_event_id)


async def _waited(remote: Remote, given: dict[str, Any], wait: float, *, spend: bool
                  ) -> ChangesPage:
    """A page that moved past ``given["after"]``, or the last look once ``wait`` is over;
    ``spend``: the first look spends the call's unit."""
    deadline, delay = time.monotonic() + wait, FIRST_POLL_S
    found = await run_in_threadpool(_page, remote, given, spend)
    while found.position <= (given["after"] or 0) and time.monotonic() < deadline:
        await asyncio.sleep(min(delay, max(0.0, deadline - time.monotonic())))
        delay = min(2 * delay, LAST_POLL_S)
        found = await run_in_threadpool(_page, remote, given, False)
    return found


def _page(remote: Remote, given: dict[str, Any], spend: bool) -> ChangesPage:
    """One look at the log (never a wait), as the caller's key may see it; ``spend``: the
    first look of a call, which counts in the key's budget."""
    budgets = remote.budgets if spend else None
    # Its running place is the feed's, held while the feed is open (``_open``).
    with budgets.spend(remote.grant, 1, held=True) if budgets else nullcontext():
        stored = grants.admit(remote.grant, OP, {**given, "wait": 0.0}, remote.client,
                              remote.claimed)
        found: ChangesPage = grants.shown_to(remote.grant, OP,
                                             remote.client.changes_page(**stored))
    return found


async def _events(request: Request, token: str, remote: Remote, given: dict[str, Any],
                  found: ChangesPage) -> AsyncIterator[bytes]:
    while True:
        # One chunk a page: each chunk of a streamed answer costs a write of its own.
        yield b"".join(f"id: {change.position}\nevent: {change.type}\ndata: ".encode()
                       + orjson.dumps(change) + b"\n\n" for change in found.changes
                       ) or b": waiting for a commit\n\n"
        try:
            await run_in_threadpool(_still_valid, request, token, remote)
            found = await _waited(remote, {**given, "after": found.position}, WAIT_S, spend=True)
        except MemqError as exc:
            yield b"event: error\ndata: " + orjson.dumps(from_error(exc)) + b"\n\n"
            return


def _still_valid(request: Request, token: str, remote: Remote) -> None:
    """The caller's token still stands for the same principal (a key not revoked since);
    its running place is kept alive for the next page."""
    principals: Principals = request.app.state.principals
    found = principals.principal(token)
    if found is None or found.grant != remote.grant:
        raise AuthenticationFailed("this token was revoked or has expired: the feed ends")
    if remote.budgets is not None:
        remote.budgets.renew(remote.grant)
