"""What stands in front of the API: a ``Host`` allow-list and a bound on request bodies.

Both are checked before the application parses anything, as a plain ASGI middleware:

* ``Host`` must name the server (the address it listens on, the loopback names, the
  machine's own names and ``--allow-host``; ``*`` allows any): a rebound DNS name is
  refused with 421, so a web page cannot make a browser talk to the API under its name.
* A body is read up to ``max_body_bytes`` and no further: a larger one (by its
  ``Content-Length`` or by what arrives) is refused with 413 before the rest is read.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Iterable, MutableMapping
from typing import Any

import orjson

from memq.problems import MEDIA_TYPE, problem

Scope = MutableMapping[str, Any]
Message = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[Message]]
Send = Callable[[Message], Awaitable[None]]
ASGIApp = Callable[[Scope, Receive, Send], Awaitable[None]]

LOOPBACK_HOSTS = frozenset({"127.0.0.1", "localhost", "::1"})


class TooLarge(Exception):
    pass


class Guard:
    """``Guard(app, allowed_hosts, max_body_bytes)`` is an ASGI app."""

    def __init__(self, app: ASGIApp, allowed_hosts: Iterable[str], max_body_bytes: int) -> None:
        self.app = app
        hosts = frozenset(h.lower().strip("[]") for h in allowed_hosts)
        self.any_host = "*" in hosts
        self.allowed_hosts = hosts | LOOPBACK_HOSTS
        self.max_body_bytes = max_body_bytes

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        headers = {k.decode("latin-1").lower(): v.decode("latin-1")
                   for k, v in scope.get("headers", ())}
        if not self.any_host and host_name(headers.get("host", "")) not in self.allowed_hosts:
            await refuse(send, 421, "PermissionDenied", "this host name is not served here")
            return
        declared = headers.get("content-length", "")
        if declared.isdigit() and int(declared) > self.max_body_bytes:
            await refuse(send, 413, "ValidationError", self._too_large())
            return
        try:
            body = await self._read_body(receive)
        except TooLarge:
            await refuse(send, 413, "ValidationError", self._too_large())
            return
        await self.app(scope, _replay(body, receive), send)

    def _too_large(self) -> str:
        return f"the request body is over the {self.max_body_bytes} byte limit"

    async def _read_body(self, receive: Receive) -> bytes:
        chunks: list[bytes] = []
        size = 0
        while True:
            message = await receive()
            if message["type"] != "http.request":
                return b"".join(chunks)  # the client went away: the app sees an empty body
            chunk = message.get("body", b"")
            size += len(chunk)
            if size > self.max_body_bytes:
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


async def refuse(send: Send, status: int, name: str, detail: str) -> None:
    body = orjson.dumps(problem(name, status, detail))
    await send({"type": "http.response.start", "status": status,
                "headers": [(b"content-type", MEDIA_TYPE.encode()),
                            (b"content-length", str(len(body)).encode()),
                            (b"connection", b"close")]})
    await send({"type": "http.response.body", "body": body})


def host_name(header: str) -> str:
    """The host name of a ``Host`` header, without its port (``[::1]:8420`` -> ``::1``)."""
    header = header.strip().lower()
    if header.startswith("["):
        return header[1:].partition("]")[0]
    return header.rpartition(":")[0] if header.count(":") == 1 else header
