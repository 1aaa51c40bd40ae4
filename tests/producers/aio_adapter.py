"""An :class:`~memq.AsyncMemoryClient` driven from sync test code, so that the behavioural
tests written for ``MemoryClient`` run against the async client too.

Each call runs on one event loop in a thread of its own (where the client lives, as in an
asyncio agent), and the test waits for its result. Only for tests: an agent awaits.
"""

from __future__ import annotations

import asyncio
import functools
import inspect
import threading
from collections.abc import AsyncIterator, Coroutine, Iterator
from contextlib import contextmanager
from typing import Any, TypeVar

import redis

from memq import AsyncMemoryClient
from memq.config import Config

T = TypeVar("T")


class _Bridge:
    """Attributes of an async object, with its coroutine methods made blocking."""

    def __init__(self, target: Any, loop: asyncio.AbstractEventLoop) -> None:
        self._target = target
        self._loop = loop

    def _call(self, coro: Coroutine[Any, Any, T]) -> T:
        return asyncio.run_coroutine_threadsafe(coro, self._loop).result()

    def __getattr__(self, name: str) -> Any:
        value = getattr(self._target, name)
        if inspect.isawaitable(value):  # an awaitable property: `await client.role`
            return self._call(_awaited(value))
        if inspect.iscoroutinefunction(value):
            # wraps: inspect.signature sees the coroutine's own parameters
            return functools.wraps(value)(
                lambda *args, **kwargs: self._call(value(*args, **kwargs)))
        if inspect.isasyncgenfunction(value):  # `async for x in client.changes()`
            return functools.wraps(value)(
                lambda *args, **kwargs: self._each(value(*args, **kwargs)))
        return value

    def _each(self, agen: AsyncIterator[T]) -> Iterator[T]:
        try:
            while True:
                try:
                    yield self._call(_next(agen))
                except StopAsyncIteration:
                    return
        finally:
            self._call(_closed(agen))


async def _awaited(value: Any) -> Any:
    return await value


async def _next(agen: AsyncIterator[T]) -> T:
    return await agen.__anext__()


async def _closed(agen: Any) -> None:
    await agen.aclose()


class SyncOverAsync(_Bridge):
    """``AsyncMemoryClient(config=...)``, called like a ``MemoryClient``."""

    def __init__(self, config: Config) -> None:
        loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=loop.run_forever, daemon=True)
        self._thread.start()
        super().__init__(AsyncMemoryClient(config=config), loop)
        self.config = config
        self.redis = redis.Redis.from_url(config.redis_url)
        """A sync connection for tests that look into Redis."""
        self.outbox = _Bridge(self._target.outbox, loop)
        self.outbox.redis = self.redis  # type: ignore[attr-defined]  # as for the client

    @contextmanager
    def batched(self) -> Iterator[SyncOverAsync]:
        block = self._target.batched()
        self._call(block.__aenter__())
        try:
            yield self
        except BaseException as exc:
            if not self._call(block.__aexit__(type(exc), exc, exc.__traceback__)):
                raise
        else:
            self._call(block.__aexit__(None, None, None))

    def _send(self, etype: str, payload: dict[str, Any], **kwargs: Any) -> str:
        client = self._target
        return self._call(_awaited(client._run(client._send_op(etype, payload, **kwargs))))

    def close(self) -> None:
        if self._loop.is_closed():
            return  # closed already: as MemoryClient.close, closing twice is harmless
        self._call(self._target.aclose())
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join()
        self._loop.close()
        self.redis.close()

    def __enter__(self) -> SyncOverAsync:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
