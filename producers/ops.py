"""The client's operations written once, without I/O, for the sync and the async client.

Every public method of :class:`~producers.client.MemoryClient` and of
:class:`~producers.aio.AsyncMemoryClient` runs the same *operation*: a generator that
validates, builds events, keeps read-your-writes state and decides, and that ``yield``\\ s a
:class:`Request` wherever it needs the outside world (send an event, the writer's commit
position, a database read). A *driver* answers each request and sends the answer back in:
:func:`drive` for the sync client, ``AsyncMemoryClient._run`` for the async one (redis.asyncio
for Redis; a worker thread for SQLite, which has no async API). So the two clients cannot
drift apart: there is one place that says what a call does.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Generator
from dataclasses import dataclass
from typing import Any, TypeVar

from memq.events import Event

T = TypeVar("T")


@dataclass(frozen=True)
class Send:
    """Send ``event`` to the writer (or buffer it inside ``batched``) -> its ``Ticket``."""

    event: Event


@dataclass(frozen=True)
class SendMany:
    """Send ``events`` in one pipeline -> their tickets, in order."""

    events: tuple[Event, ...]


@dataclass(frozen=True)
class AskRole:
    """-> the :class:`~memq.authority.Role` of the client's Redis credentials."""

    action: str
    """What the client was doing, for the error if Redis cannot say."""


@dataclass(frozen=True)
class AskPosition:
    """-> the writer's commit position, or None while Redis cannot tell."""


@dataclass(frozen=True)
class Read:
    """-> ``fn(conn, *args)`` on a borrowed read-only connection."""

    fn: Callable[..., Any]
    args: tuple[Any, ...] = ()


@dataclass(frozen=True)
class Run:
    """-> ``fn(*args)``: blocking work through the client's own caches (several reads,
    the query's embedding), done as one piece.

    ``with_position``: the work may need the writer's commit position (working memory
    drops a pending turn the writer settled); a driver that cannot read Redis from inside
    the work reads it first and serves that value (``commit_position_hint``).
    """

    fn: Callable[..., Any]
    args: tuple[Any, ...] = ()
    with_position: bool = False


@dataclass(frozen=True)
class Flush:
    """Wait until the writer has committed everything sent so far (raises as ``flush``)."""

    timeout: float


@dataclass(frozen=True)
class Fetch:
    """-> the value of one Redis key (bytes) or None."""

    key: str
    action: str


@dataclass(frozen=True)
class Sleep:
    seconds: float


@dataclass(frozen=True)
class Poll:
    """(An outbox's flush) -> (commit position, rejections not yet raised), or the
    :class:`~memq.errors.BrokerError` met asking."""


Request = Send | SendMany | AskRole | AskPosition | Read | Run | Flush | Fetch | Sleep | Poll

Op = Generator[Request, Any, T]
"""An operation that returns ``T``."""


def drive(op: Op[T], answer: Callable[[Request], Any]) -> T:
    """Run ``op`` to its end, answering each request with ``answer`` (the sync driver)."""
    try:
        request = next(op)
        while True:
            try:
                value = answer(request)
            except Exception as exc:  # the operation may handle it (flush's rejections)
                request = op.throw(exc)
            else:
                request = op.send(value)
    except StopIteration as stop:
        result: T = stop.value
        return result


async def drive_async(op: Op[T], answer: Callable[[Request], Awaitable[Any]]) -> T:
    """Run ``op`` to its end, awaiting ``answer`` for each request (the async driver).

    A cancellation requested while an answer was awaited is raised even if the I/O below
    lost it: redis.asyncio (8.1, Python 3.11) returns normally from a pipeline cancelled at
    the wrong moment, and the caller's ``task.cancel()`` would then never take effect.
    """
    task = asyncio.current_task()
    try:
        request = next(op)
        while True:
            requested = 0 if task is None else task.cancelling()
            try:
                value = await answer(request)
            except Exception as exc:  # as drive's
                request = op.throw(exc)
                continue
            if task is not None and task.cancelling() > requested:
                raise asyncio.CancelledError
            request = op.send(value)
    except StopIteration as stop:
        result: T = stop.value
        return result
