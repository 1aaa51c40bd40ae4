"""The guard in front of ``memq serve`` and ``memq mcp --http``, under a real uvicorn, on a
real socket: no body is read before the token is checked, bodies are bounded in number and
time, and a browser's request from another origin is refused.

An outside review found bodies buffered before the token was checked, with no read
timeout: 12 unauthenticated connections sending 15 MB each grew the server by 200 MB, and a
body trickled one byte per 5 s was still open after a minute.
"""

from __future__ import annotations

import socket
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest
import uvicorn

from memq.authority import Role
from memq.server.guard import Guard
from memq.testing import free_port
from memq.tokens import Tokens
from tests.scheduled import eventually

BODIES_READ: list[bytes] = []


async def echo(scope: Any, receive: Any, send: Any) -> None:
    """The application behind the guard: records each body it got, answers 200."""
    if scope["type"] != "http":
        return  # uvicorn's lifespan: no startup to run
    message = await receive()
    BODIES_READ.append(message.get("body", b""))
    await send({"type": "http.response.start", "status": 200, "headers": []})
    await send({"type": "http.response.body", "body": b"ok"})


@contextmanager
def guarded(tmp_path: Path, **options: Any) -> Iterator[tuple[int, str]]:
    tokens = Tokens.in_directory(tmp_path)
    port = free_port()
    app = Guard(echo, [], 1 << 20, **{"tokens": tokens, **options})
    server = uvicorn.Server(uvicorn.Config(app, host="127.0.0.1", port=port,
                                           log_level="warning"))
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    while not server.started:
        time.sleep(0.01)
    try:
        yield port, tokens.by_role[next(iter(tokens.by_role))]
    finally:
        server.should_exit = True
        thread.join()


def request(port: int, head: str, body: bytes = b"") -> socket.socket:
    connection = socket.create_connection(("127.0.0.1", port), timeout=10)
    connection.sendall(head.encode() + b"\r\n" + body)
    return connection


def status(connection: socket.socket) -> int:
    reply = connection.recv(4096)
    return int(reply.split(b" ", 2)[1])


def post(token: str | None, length: int, extra: str = "") -> str:
    auth = f"Authorization: Bearer {token}\r\n" if token else ""
    return (f"POST /v1/messages HTTP/1.1\r\nHost: 127.0.0.1\r\n{auth}{extra}"
            f"Content-Length: {length}\r\n")


def test_no_body_is_read_before_the_token_is_checked(tmp_path: Path) -> None:
    BODIES_READ.clear()
    with guarded(tmp_path) as (port, _):
        for token in (None, "not-one-of-ours"):
            connection = request(port, post(token, 15_000_000), b"x" * 1000)
            assert status(connection) == 401  # answered with 14.999 MB still unsent
            connection.close()
    assert BODIES_READ == []


def test_a_spent_budget_is_refused_before_the_body_is_read(tmp_path: Path) -> None:
    BODIES_READ.clear()
    with guarded(tmp_path, spent=lambda token, path: "no room") as (port, token):
        connection = request(port, post(token, 15_000_000), b"{")
        reply = connection.recv(4096)  # answered with the body still unsent
        connection.close()
    assert reply.split(b" ", 2)[1] == b"429"
    assert b"retry-after: 1" in reply.lower()
    assert BODIES_READ == []


def test_a_trickled_body_is_cut_off(tmp_path: Path) -> None:
    with guarded(tmp_path, body_timeout_s=0.5) as (port, token):
        connection = request(port, post(token, 100), b"{")
        started = time.monotonic()
        assert status(connection) == 408
        assert time.monotonic() - started < 5
        connection.close()


def test_bodies_read_at_once_are_bounded(tmp_path: Path) -> None:
    """Beyond the bound a body is refused at once, not queued: memory stays bounded."""
    with guarded(tmp_path, max_bodies=2, body_timeout_s=5) as (port, token):
        slow = [request(port, post(token, 100), b"{") for _ in range(2)]
        time.sleep(0.2)
        third = request(port, post(token, 2), b"{}")
        assert status(third) == 503
        for connection in (*slow, third):
            connection.close()


def test_one_credential_holds_at_most_its_share_of_the_body_places(tmp_path: Path) -> None:
    """A review found one key's 70 sockets, each sending a body's first byte, holding all
    64 places: every other caller's POST got 503 until they closed."""
    with guarded(tmp_path, max_bodies=4, max_bodies_each=2, body_timeout_s=60) as (port, _):
        tokens = Tokens.in_directory(tmp_path)
        slow = [request(port, post(tokens.by_role[Role.AGENT], 100), b"{")
                for _ in range(6)]

        def its_next_post() -> int:
            connection = request(port, post(tokens.by_role[Role.AGENT], 2), b"{}")
            with connection:
                return status(connection)

        # Once two of its bodies are being read, its next is refused before it is read.
        eventually(lambda: its_next_post() == 429, "the agent token's share to be taken")
        other = request(port, post(tokens.by_role[Role.ADMIN], 2), b"{}")
        assert status(other) == 200
        for connection in (*slow, other):
            connection.close()


class _Keys:
    """Two keys' secrets and the person's token, as the server's door would know them."""

    def __init__(self, person: str) -> None:
        self.roles = {"secret-a": Role.AGENT, "secret-b": Role.AGENT, person: Role.ADMIN}

    def role_of(self, presented: str) -> Role | None:
        return self.roles.get(presented)

    def holder_of(self, presented: str) -> str | None:
        return {"secret-a": "key-a", "secret-b": "key-b"}.get(presented)


def test_keys_together_leave_the_shared_tokens_places(tmp_path: Path) -> None:
    """Each key holds at most its share, but enough keys trickling bodies at once held
    every place, the person's too. Here two keys of 2 places each on a server of 4: the
    second key's second body is refused, and the person's token is still read."""
    person = Tokens.in_directory(tmp_path).by_role[Role.ADMIN]
    door = _Keys(person)
    with guarded(tmp_path, max_bodies=4, max_bodies_each=2, body_timeout_s=60,
                 tokens=door, holder=door.holder_of) as (port, _):
        slow = [request(port, post("secret-a", 100), b"{") for _ in range(2)]
        slow.append(request(port, post("secret-b", 100), b"{"))

        def bs_next_post() -> int:
            connection = request(port, post("secret-b", 2), b"{}")
            slow.append(connection)
            return status(connection)

        eventually(lambda: bs_next_post() == 503, "the keys' part of the places to be taken")
        answer = request(port, post(person, 2), b"{}")
        assert status(answer) == 200
        for connection in (*slow, answer):
            connection.close()


@pytest.mark.parametrize(("origin", "expected"), [
    ("https://evil.example", 403), ("http://127.0.0.1:8420", 200), (None, 200),
])
def test_a_request_from_another_origin_is_refused(
    tmp_path: Path, origin: str | None, expected: int
) -> None:
    extra = f"Origin: {origin}\r\n" if origin else ""
    with guarded(tmp_path) as (port, token):
        connection = request(port, post(token, 2, extra), b"{}")
        assert status(connection) == expected
        connection.close()
