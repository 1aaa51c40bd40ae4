"""``AsyncRemoteMemoryClient``: :class:`~memq.producers.remote.RemoteMemoryClient` for
asyncio, on :class:`httpx.AsyncClient` (native: no thread per call)::

    from memq import AsyncRemoteMemoryClient

    async with AsyncRemoteMemoryClient("http://127.0.0.1:8420", token=token) as m:
        await m.append("s1", "user", "hello")
        await m.flush()
        items = await m.get_context("s1", "greeting")

Every method is the sync client's, awaited; the requests and answers are the same
(:mod:`memq.producers.remote_calls`).
"""

from __future__ import annotations

import uuid
from collections.abc import AsyncIterator, Awaitable, Sequence
from contextlib import asynccontextmanager
from typing import Any

import httpx

from memq import tls
from memq.authority import Role
from memq.producers import remote_calls as calls
from memq.producers.keys import DelegatedToken
from memq.producers.remote import headers, unreachable
from memq.producers.surface_async import AsyncSurface

__all__ = ["AsyncRemoteMemoryClient"]


class AsyncRemoteMemoryClient(AsyncSurface):
    """A handle on a memq server for coroutines of one event loop."""

    def __init__(self, base_url: str, *, token: str,
                 timeout: float = calls.DEFAULT_TIMEOUT_S, verify: Any = True) -> None:
        self.base_url = calls.server_url(base_url)
        self.client_id = uuid.uuid4().hex
        self.timeout = timeout
        self.http = httpx.AsyncClient(base_url=self.base_url, verify=tls.verify(verify),
                                      headers=headers(token, self.client_id))
        self._role: Role | None = None
        self._sent = calls.Sent()

    async def aclose(self) -> None:
        await self.http.aclose()

    async def __aenter__(self) -> AsyncRemoteMemoryClient:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.aclose()

    async def _run(self, call: calls.Call) -> Any:
        try:
            answer = await self.http.request(call.method, call.path, content=call.content(),
                                       timeout=self.timeout + call.waits_s)
        except httpx.HTTPError as exc:
            raise unreachable(self.base_url, exc) from exc
        self._sent.note(answer.headers.get(calls.SENT_HEADER))
        return call.result(answer.status_code, answer.content)

    @property
    def role(self) -> Awaitable[Role]:
        """The role of this client's token (agent or admin): ``await client.role``, as
        :class:`AsyncMemoryClient`'s."""
        return self._whoami()

    async def _whoami(self) -> Role:
        if self._role is None:
            self._role = Role(await self._run(calls.whoami()))
        return self._role

    async def delegate(self, *, users: Sequence[str] | None = None,
                 agents: Sequence[str] | None = None, can: Sequence[str] | None = None,
                 minutes: float = 15.0) -> DelegatedToken:
        """A token narrower than this client's key (a subset of its users, agents and
        rights) that lives ``minutes`` (never beyond the key): for one agent run of one
        end user. The key must have ``delegate``; a server's, so a remote client's alone."""
        result: DelegatedToken = await self._run(calls.delegate(users, agents, can, minutes))
        return result

    async def _call(self, name: str, arguments: dict[str, Any]) -> Any:
        """The transport of :class:`~memq.producers.surface_async.AsyncSurface`."""
        return await self._run(calls.call(name, arguments, self._sent))

    @asynccontextmanager
    async def batched(self) -> AsyncIterator[AsyncRemoteMemoryClient]:
        """Accepted for the local client's sake; each call is still its own request (use
        :meth:`append_many` to send many turns in one)."""
        yield self
