"""What stands in front of the API: who may send a body, how many, how big and how slowly.

All of it is checked before the application parses anything, as a plain ASGI middleware:

* ``Host`` must name the server (the address it listens on, the loopback names, the
  machine's own names and ``--allow-host``; ``*`` allows any): a rebound DNS name is
  refused with 421, so a web page cannot make a browser talk to the API under its name.
  An ``Origin`` (a browser's request) must name an allowed host too, or it gets 403.
* A request with a body must carry a token the server issued (``tokens``), checked before a
  byte of the body is read: without one, 401, and the body is never read. The console's
  forms (``door``) come with a session cookie instead, and its login form with neither,
  under a body limit of a few kilobytes.
* At most ``max_bodies`` bodies are read at once (beyond, 503 after a second's wait), each
  up to ``max_body_bytes`` (by its ``Content-Length`` or by what arrives: 413 before the
  rest is read) and within ``body_timeout_s`` (408): a body trickled a byte at a time does
  not hold a place for long, and what bodies hold in memory stays bounded.
* One credential (``holder``: a key with its delegated tokens; without a ``holder``, each
  token; a shared role's token has no share, only the places all share) has at most
  ``max_bodies_each`` of those places (beyond, 429 after a second's wait: a burst of small
  bodies queues briefly), and before its body is read a key pays its call's first unit of
  budget and takes one of its running calls (``paying``, its ``concurrent`` bound on every
  server; beyond either, 429 at once), held until the call is answered: a caller
  trickling bodies on many sockets holds its own share, and every other caller's POSTs
  (the admin's flush too) still find places; all shares together hold at most
  :data:`KEYS_PART` of the places, so many keys at once cannot take the shared tokens'.
  The route then pays only what the call costs beyond that unit (:data:`PAID`). Its
  server keeps a place and units ahead for the key's next calls (``budgets.py``): a key
  calling steadily asks Redis once in many calls.
"""

from __future__ import annotations

import asyncio
from collections import Counter
from collections.abc import Awaitable, Callable, Iterable, MutableMapping
from contextlib import AbstractContextManager, ExitStack, suppress
from dataclasses import dataclass
from typing import Any, Protocol
from urllib.parse import urlsplit

import orjson

from memq.authority import Role
from memq.errors import MemqError, RateLimited
from memq.problems import MEDIA_TYPE, problem

Scope = MutableMapping[str, Any]
Message = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[Message]]
Send = Callable[[Message], Awaitable[None]]
ASGIApp = Callable[[Scope, Receive, Send], Awaitable[None]]

LOOPBACK_HOSTS = frozenset({"127.0.0.1", "localhost", "::1"})


@dataclass(frozen=True)
class Gate:
    """How a request let in without a bearer token may send its body."""

    limit: int
    """Its most bytes."""
    places: asyncio.Semaphore | None = None
    """Places of its own (None: the guard's, shared with every authenticated body): a
    body anyone may send must never take the places of those who are known."""
    timeout_s: float | None = None
    """Its own time to arrive whole (None: the guard's)."""


Door = Callable[[str, dict[str, str]], "Gate | None"]
"""(path, headers) -> how a request let in without a bearer token sends its body, or None."""


class RoleOf(Protocol):
    """What a presented token stands for (``server/principals.py``, ``memq.tokens``)."""

    def role_of(self, presented: str) -> Role | None: ...


Spent = Callable[[str, str], "str | None"]
"""(token, path) -> why the call has no room now (its key's budget, or a write's queue), or
None: refused with 429 before its body is read."""

Paying = Callable[[str], AbstractContextManager[object]]
"""token -> held from before its body is read until its call is answered: the call's first
unit of its key's budget and one of its key's running calls (``Budgets.entering``);
``RateLimited`` when its key has no room for either."""

PAID = "memq.paid"
"""Set in a request's ``state`` once the guard has paid its first unit (``paying``): what
the route spends is the call's cost less that unit, in the place the guard holds."""


class TooLarge(Exception):
    pass


MAX_BODIES = 64
"""Bodies read at once; with ``max_body_bytes``-sized ones, the most the guard holds in
memory is their product. Small bodies arrive whole at once, so many callers share these."""

MAX_BODIES_EACH = 8
"""Bodies one credential may have read at once: an eighth of :data:`MAX_BODIES`, so a
caller that trickles bodies on many sockets never holds every place."""

KEYS_PART = 3 / 4
"""Of the places bodies are read in, the part every share together may hold: the rest is
always the shared tokens' (the deployment's agents and the person), however many keys
trickle their bodies at once."""

PLACE_WAIT_S = 1.0
"""How long a body waits for a place before it is refused with 503."""

BODY_TIMEOUT_S = 30.0
"""The longest one body may take to arrive whole."""

BODILESS = frozenset({"GET", "HEAD", "OPTIONS"})


class Guard:
    """``Guard(app, allowed_hosts, max_body_bytes, tokens=...)`` is an ASGI app."""

    def __init__(self, app: ASGIApp, allowed_hosts: Iterable[str], max_body_bytes: int, *,
                 tokens: RoleOf | None = None, max_bodies: int = MAX_BODIES,
                 body_timeout_s: float = BODY_TIMEOUT_S,
                 spent: Spent | None = None, door: Door | None = None,
                 max_bodies_each: int = MAX_BODIES_EACH,
                 holder: Callable[[str], str | None] | None = None,
                 paying: Paying | None = None) -> None:
        self.app = app
        hosts = frozenset(h.lower().strip("[]") for h in allowed_hosts)
        self.any_host = "*" in hosts
        self.allowed_hosts = hosts | LOOPBACK_HOSTS
        self.max_body_bytes = max_body_bytes
        self.tokens = tokens
        self.spent = spent
        """Why a token's call has no room now (its budget, its queue), or None: refused
        before its body is read, so a flood past its bounds costs a header's worth of work."""
        self.door = door
        """How a request without a bearer token may send its body (the console's forms,
        ``Gate``), or None: it may not."""
        self.body_timeout_s = body_timeout_s
        self.places = asyncio.Semaphore(max_bodies)
        self.max_bodies_each = max_bodies_each
        self.holder = holder
        """Whose places a token's bodies take (a delegated token's are its key's); None:
        each token is a credential of its own."""
        self.paying = paying
        self.shares: dict[str, asyncio.Semaphore] = {}
        self.shared_by_shares = asyncio.Semaphore(max(1, int(max_bodies * KEYS_PART)))
        self.using: Counter[str] = Counter()
        """Per holder, its share of the places and its bodies read or waiting for one (only
        while it has some: idle callers cost nothing)."""

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        headers = {k.decode("latin-1").lower(): v.decode("latin-1")
                   for k, v in scope.get("headers", ())}
        gate = Gate(self.max_body_bytes)
        refusal = self._refusal(scope, headers)
        if isinstance(refusal, Gate):
            gate, refusal = refusal, None
        if refusal is not None:
            await refuse(send, *refusal)
            return
        if scope.get("method") in BODILESS and not _declares_body(headers):
            await self.app(scope, receive, send)
            return
        await self._with_body(scope, receive, send, gate, _token(headers))

    def _refusal(self, scope: Scope, headers: dict[str, str]
                 ) -> tuple[int, str, str] | Gate | None:
        """What is wrong with a request before any of its body is read, if anything; the
        gate of a request let in by the door."""
        if not self._allowed(headers.get("host", "")):
            return 421, "PermissionDenied", "this host name is not served here"
        origin = headers.get("origin")
        if origin is not None and not self._allowed(urlsplit(origin).netloc):
            return 403, "PermissionDenied", "requests from this origin are not served here"
        needs_token = scope.get("method") not in BODILESS or _declares_body(headers)
        if needs_token and self.tokens is not None and not self._token_ok(headers):
            return self._through_door(scope, headers)
        why = self.spent(_token(headers), scope.get("path", "")) \
            if needs_token and self.spent is not None else None
        if why is not None:
            return 429, "RateLimited", why
        return self._oversized(headers, self.max_body_bytes)

    def _through_door(self, scope: Scope, headers: dict[str, str]
                      ) -> tuple[int, str, str] | Gate:
        gate = None if self.door is None else self.door(scope.get("path", ""), headers)
        if gate is None:
            return 401, "AuthenticationFailed", (
                "a bearer token is needed: a key (memq keys create), or agent.token or "
                "admin.token beside the database")
        return self._oversized(headers, gate.limit) or gate

    def _oversized(self, headers: dict[str, str], limit: int) -> tuple[int, str, str] | None:
        declared = headers.get("content-length", "")
        if declared.isdigit() and int(declared) > limit:
            return 413, "ValidationError", _too_large(limit)
        return None

    def _allowed(self, host: str) -> bool:
        return self.any_host or host_name(host) in self.allowed_hosts

    def _token_ok(self, headers: dict[str, str]) -> bool:
        assert self.tokens is not None
        token = _token(headers)
        return bool(token) and self.tokens.role_of(token) is not None

    async def _with_body(self, scope: Scope, receive: Receive, send: Send,
                         gate: Gate, token: str) -> None:
        with ExitStack() as running:  # the key's place, until its call is answered
            with ExitStack() as reading:  # the places bodies are read in
                refusal = (await self._share(reading, token) or self._pay(running, token, scope)
                           or await self._place(reading, gate))
                if refusal is not None:
                    await refuse(send, *refusal)
                    return
                body = await self._read_in_time(receive, send, gate)
            if body is not None:
                await self.app(scope, _replay(body, receive), _giving_back(running, send))

    async def _share(self, held: ExitStack, token: str) -> tuple[int, str, str] | None:
        """One of the credential's places for its body (given back with ``held``), or 429.
        A request without a bearer token came by the door (the console's forms), whose
        gate bounds it."""
        who = (self.holder(token) if self.holder else token) if token else None
        if who is None:  # no one's share: the places every caller shares bound it
            return None
        share = self.shares.setdefault(who, asyncio.Semaphore(self.max_bodies_each))
        self.using[who] += 1
        held.callback(self._left, who)
        return await _taken(held, share, (
            429, "RateLimited", "this credential already has as many request bodies being "
                                "read as it may; retry in a moment")) or await _taken(
            held, self.shared_by_shares, (
                503, "Busy", "this server reads as many keys' request bodies as it allows "
                             "at once; retry in a moment"))

    def _left(self, who: str) -> None:
        self.using[who] -= 1
        if self.using[who] <= 0:  # nobody holds or waits on its share: forget it
            del self.using[who], self.shares[who]

    def _pay(self, held: ExitStack, token: str, scope: Scope) -> tuple[int, str, str] | None:
        """The call's first unit and one of the key's running calls (``paying``), held
        with ``held`` and marked :data:`PAID` in the request's state; or why not."""
        if self.paying is None or not token:
            return None
        try:  # in the loop: seldom a Redis call (what the server holds ahead serves most)
            held.enter_context(self.paying(token))
        except RateLimited as exc:
            return 429, "RateLimited", str(exc)
        except MemqError:  # Redis away: the call could not be counted, nor served
            return 503, "BrokerError", "this key's calls cannot be counted now; retry soon"
        scope.setdefault("state", {})[PAID] = True
        return None

    async def _place(self, held: ExitStack, gate: Gate) -> tuple[int, str, str] | None:
        """One of the places bodies are read in (given back with ``held``), or 503."""
        return await _taken(held, gate.places or self.places, (
            503, "Busy", "this server reads as many request bodies as it allows at once; "
                         "retry in a moment"))

    async def _read_in_time(self, receive: Receive, send: Send, gate: Gate) -> bytes | None:
        """The whole body, or None once the caller was told why not (413, 408)."""
        timeout = gate.timeout_s or self.body_timeout_s
        try:
            return await asyncio.wait_for(_read_body(receive, gate.limit), timeout)
        except TooLarge:
            await refuse(send, 413, "ValidationError", _too_large(gate.limit))
        except TimeoutError:
            await refuse(send, 408, "ValidationError", "the request body did not arrive "
                         f"within {timeout:g} s")
        return None


def _too_large(limit: int) -> str:
    return f"the request body is over the {limit} byte limit"


async def _read_body(receive: Receive, limit: int) -> bytes:
    chunks: list[bytes] = []
    size = 0
    while True:
        message = await receive()
        if message["type"] != "http.request":
            return b"".join(chunks)  # the client went away: the app sees an empty body
        chunk = message.get("body", b"")
        size += len(chunk)
        if size > limit:
            raise TooLarge
        chunks.append(chunk)
        if not message.get("more_body", False):
            return b"".join(chunks)


def _replay(body: bytes, receive: Receive) -> Receive:
    sent = False

    async def replay() -> Message:
        nonlocal sent
        if not sent:
            sent = True
            return {"type": "http.request", "body": body, "more_body": False}
        return await receive()  # then the disconnect, when it comes

    return replay


EXTRA_HEADERS = {401: [(b"www-authenticate", b'Bearer realm="memq"')],
                 429: [(b"retry-after", b"1")], 503: [(b"retry-after", b"1")]}


def _giving_back(running: ExitStack, send: Send) -> Send:
    """``send``, which gives back what ``running`` holds just before the answer's last part
    goes out: a caller that hears its call answered finds its key's place free for the
    next (a key of one running call sends call after call)."""
    async def sending(message: Message) -> None:
        if message["type"] == "http.response.body" and not message.get("more_body", False):
            # Redis away: the answer still goes out, the place lapses with its count.
            with suppress(MemqError):
                running.close()
        await send(message)
    return sending


async def _taken(held: ExitStack, places: asyncio.Semaphore, refusal: tuple[int, str, str]
                 ) -> tuple[int, str, str] | None:
    """One of ``places``, given back with ``held``; ``refusal`` if none came free within
    :data:`PLACE_WAIT_S`."""
    if places.locked():  # wait_for makes a task and a timer: only when there is a wait
        try:
            await asyncio.wait_for(places.acquire(), PLACE_WAIT_S)
        except TimeoutError:
            return refusal
    else:
        await places.acquire()  # free: taken at once, never suspended
    held.callback(places.release)
    return None


async def refuse(send: Send, status: int, name: str, detail: str) -> None:
    body = orjson.dumps(problem(name, status, detail))
    await send({"type": "http.response.start", "status": status,
                "headers": [(b"content-type", MEDIA_TYPE.encode()),
                            (b"content-length", str(len(body)).encode()),
                            (b"connection", b"close"), *EXTRA_HEADERS.get(status, [])]})
    await send({"type": "http.response.body", "body": body})


def _token(headers: dict[str, str]) -> str:
    """The bearer token of a request, or ''."""
    scheme, _, token = headers.get("authorization", "").partition(" ")
    return token.strip() if scheme.lower() == "bearer" else ""


def _declares_body(headers: dict[str, str]) -> bool:
    length = headers.get("content-length", "0")
    return "transfer-encoding" in headers or not length.isdigit() or int(length) > 0


def host_name(header: str) -> str:
    """The host name of a ``Host`` header, without its port (``[::1]:8420`` -> ``::1``)."""
    header = header.strip().lower()
    if header.startswith("["):
        return header[1:].partition("]")[0]
    return header.rpartition(":")[0] if header.count(":") == 1 else header
