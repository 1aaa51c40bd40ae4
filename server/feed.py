"""``GET /v1/changes``: the change feed as server-sent events.

Each change is one event: ``id`` its position, ``event`` its type, ``data`` the change as
JSON. A follower that reconnects sends the last ``id`` it handled as ``Last-Event-ID`` (as
browsers' ``EventSource`` does) or ``?after=``, and the stream goes on from there, in
commit order, each change once. Every page is read as ``POST /v1/changes/page`` reads it:
admitted against the caller's key, cut to its grant and tenant, counted in its budget.
The caller's token is read again before each page, so a revoked or expired key's stream
ends within a page's wait. An error before the first byte is a problem details answer
(404, 410 with the ``horizon``, 422); after it, an ``error`` event, and the stream ends.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import nullcontext
from typing import Any

import orjson
from fastapi import APIRouter, Depends, Query, Request
from fastapi.responses import StreamingResponse

from memq.errors import AuthenticationFailed, MemqError, ValidationError
from memq.problems import from_error
from memq.producers.changes import ChangesPage
from memq.producers.operations import OPERATIONS
from memq.server import grants
from memq.server.principals import Principals
from memq.server.remotes import Remote, caller
from memq.server.routes import PROBLEMS

router = APIRouter(prefix="/v1")
PAGE = 200
WAIT_S = 10.0
"""How long one page waits for a commit; a comment line keeps the stream alive after."""


@router.get("/changes", responses=PROBLEMS, response_class=StreamingResponse)
def follow(request: Request, after: int | None = None,
           types: list[str] | None = Query(default=None),  # noqa: B008 (FastAPI's way)
           user_id: str | None = None, remote: Remote = Depends(caller),  # noqa: B008
           ) -> StreamingResponse:
    """Committed changes after ``after`` (or ``Last-Event-ID``), as server-sent events."""
    given = {"after": _start(after, request.headers.get("last-event-id")), "types": types,
             "user_id": user_id, "limit": PAGE}
    first = _page(remote, given, wait=0.0)  # its errors are the answer's status
    token = request.headers.get("authorization", "").partition(" ")[2].strip()
    return StreamingResponse(_events(request, token, remote, given, first),
                             media_type="text/event-stream",
                             headers={"cache-control": "no-store"})


def _start(after: int | None, last_event_id: str | None) -> int | None:
    if last_event_id is None:
        return after
    if not last_event_id.isdigit() or len(last_event_id) > 18:
        raise ValidationError(f"Last-Event-ID must be a position the feed sent, got "
                              f"{last_event_id[:40]!r}")
    return int(last_event_id)


def _page(remote: Remote, given: dict[str, Any], wait: float) -> ChangesPage:
    op = OPERATIONS["changes_page"]
    with remote.budgets.spend(remote.grant, 1) if remote.budgets else nullcontext():
        stored = grants.admit(remote.grant, op, {**given, "wait": wait}, remote.client,
                              remote.claimed)
        page: ChangesPage = grants.shown_to(remote.grant, op,
                                            remote.client.changes_page(**stored))
    return page


def _events(request: Request, token: str, remote: Remote, given: dict[str, Any],
            page: ChangesPage) -> Iterator[bytes]:
    while True:
        # One chunk a page: each chunk of a streamed answer is a hop between threads.
        yield b"".join(f"id: {change.position}\nevent: {change.type}\ndata: ".encode()
                       + orjson.dumps(change) + b"\n\n" for change in page.changes
                       ) or b": waiting for a commit\n\n"
        try:
            _still_valid(request, token, remote)
            page = _page(remote, {**given, "after": page.position}, wait=WAIT_S)
        except MemqError as exc:
            yield b"event: error\ndata: " + orjson.dumps(from_error(exc)) + b"\n\n"
            return


def _still_valid(request: Request, token: str, remote: Remote) -> None:
    """The caller's token still stands for the same principal (a key not revoked since)."""
    principals: Principals = request.app.state.principals
    found = principals.principal(token)
    if found is None or found.grant != remote.grant:
        raise AuthenticationFailed("this token was revoked or has expired: the feed ends")
