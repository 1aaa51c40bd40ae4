"""``RemoteMemoryClient``: :class:`~memq.producers.client.MemoryClient`'s methods over HTTP,
against ``memq serve`` (an agent on another host, or without the SQLite file)::

    from memq import RemoteMemoryClient

    with RemoteMemoryClient("http://127.0.0.1:8420", token=open("data/agent.token").read()) as m:
        m.append("s1", "user", "hello")
        m.flush()
        items = m.get_context("s1", "greeting")

Same arguments, same result types (:class:`ContextItem`, :class:`Message`, :class:`Task`...),
same errors (the server's problem details are raised as the :mod:`memq.errors` class they
name). Each client sends its own id, so its :meth:`flush` waits for what *it* appended and
raises *its* rejections. What a remote client cannot do: ``batched()`` (use
:meth:`append_many`), and reading the database or Redis directly.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from typing import Any

import httpx

from memq import tls
from memq.authority import Role
from memq.errors import BrokerError
from memq.producers import remote_calls as calls
from memq.producers.keys import DelegatedToken
from memq.producers.surface import Surface

__all__ = ["RemoteMemoryClient"]


def headers(token: str, client_id: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {token.strip()}", calls.CLIENT_ID_HEADER: client_id,
            "Content-Type": "application/json"}


def unreachable(base_url: str, exc: httpx.HTTPError) -> BrokerError:
    return BrokerError(f"memq serve at {base_url} did not answer: {type(exc).__name__}: {exc}")


class RemoteMemoryClient(Surface):
    """A handle on a memq server; thread-safe (httpx's connection pool)."""

    def __init__(self, base_url: str, *, token: str,
                 timeout: float = calls.DEFAULT_TIMEOUT_S, verify: Any = True) -> None:
        self.base_url = calls.server_url(base_url)
        self.client_id = uuid.uuid4().hex
        self.timeout = timeout
        self.http = httpx.Client(base_url=self.base_url, verify=tls.verify(verify),
                                 headers=headers(token, self.client_id))
        self._role: Role | None = None
        self._sent = calls.Sent()

    def close(self) -> None:
        self.http.close()

    def __enter__(self) -> RemoteMemoryClient:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def _run(self, call: calls.Call) -> Any:
        try:
            answer = self.http.request(call.method, call.path, content=call.content(),
                                       timeout=self.timeout + call.waits_s)
        except httpx.HTTPError as exc:
            raise unreachable(self.base_url, exc) from exc
        self._sent.note(answer.headers.get(calls.SENT_HEADER))
        return call.result(answer.status_code, answer.content)

    @property
    def role(self) -> Role:
        """The role of this client's token (agent or admin)."""
        if self._role is None:
            self._role = Role(self._run(calls.whoami()))
        return self._role

    def delegate(self, *, users: Sequence[str] | None = None,
                 agents: Sequence[str] | None = None, can: Sequence[str] | None = None,
                 minutes: float = 15.0) -> DelegatedToken:
        """A token narrower than this client's key (a subset of its users, agents and
        rights) that lives ``minutes`` (never beyond the key): for one agent run of one
        end user. The key must have ``delegate``; a server's, so a remote client's alone."""
        result: DelegatedToken = self._run(calls.delegate(users, agents, can, minutes))
        return result

    def _call(self, name: str, arguments: dict[str, Any]) -> Any:
        """The transport of :class:`~memq.producers.surface.Surface`: one request."""
        return self._run(calls.call(name, arguments, self._sent))

    @contextmanager
    def batched(self) -> Iterator[RemoteMemoryClient]:
        """Accepted for the local client's sake; each call is still its own request (use
        :meth:`append_many` to send many turns in one)."""
        yield self
