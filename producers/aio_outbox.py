"""The async client's outbox: :class:`~producers.outbox.OutboxState` over redis.asyncio.

Everything it decides — the size check, tickets, the ``batched`` buffer, the flush loop
and its rejections — is :class:`~producers.outbox.OutboxState`'s, shared with the sync
:class:`~producers.outbox.Outbox`; this module only does the I/O, without blocking the
event loop. Many coroutines may send at once: each XADD takes its own pooled connection,
and ``flush`` waits for the highest entry any of them got.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
from contextlib import asynccontextmanager
from typing import Any, TypeVar

import redis.asyncio

from memq import acl
from memq.authority import STREAM_OF_ROLE, Role
from memq.broker import retrying_async, translated
from memq.config import ClientConfig, LimitsConfig
from memq.errors import BrokerError
from memq.events import Event
from memq.inbox import send_to_inbox_async, stream_position
from memq.producers.ops import Request, Sleep, drive_async
from memq.producers.outbox import OutboxState, Position, Ticket, commit_key
from memq.rejections import Rejection

T = TypeVar("T")


class AsyncOutbox(OutboxState):
    """Sends events through redis.asyncio; ``flush`` waits with ``asyncio.sleep``."""

    def __init__(
        self, broker: redis.asyncio.Redis, url: str, *,
        retry_for_s: float = ClientConfig.retry_for_s,
        max_event_bytes: int = LimitsConfig.max_payload_bytes,
        wait_replicas: int = 0, wait_timeout_s: float = ClientConfig.wait_timeout_s,
    ) -> None:
        super().__init__(url, retry_for_s=retry_for_s, max_event_bytes=max_event_bytes,
                         wait_replicas=wait_replicas, wait_timeout_s=wait_timeout_s)
        self.redis = broker
        self._in_flight = 0
        """Sends on their way to Redis: while any is, new ones queue for one pipeline."""
        self._queued: list[tuple[bytes, Ticket, asyncio.Future[None]]] = []
        self._sender: asyncio.Task[None] | None = None

    async def resolve_role(self, action: str) -> Role:
        """The role of these credentials, asked once; a failure names ``action``."""
        if self._role is None:
            self._role = await self._retrying(action, lambda: acl.role_of_async(self.redis))
        return self._role

    async def send(self, event: Event) -> Ticket:
        """Send ``event`` (or buffer it, inside :meth:`batched`); its ticket says where.

        Alone, an event goes in one round trip. Events sent while others are on their way (many
        tasks appending at once) wait for the next round trip and share one pipeline:
        concurrency costs round trips no more than ``batched`` does.
        """
        raw, ticket = self._prepare(event)
        if self._buffer is not None:
            if self._buffer_event(raw, ticket):
                await self._drain()
            return ticket
        if self._in_flight or self._queued:
            return await self._ride(raw, ticket)
        self._in_flight += 1
        try:
            stream = STREAM_OF_ROLE[await self.resolve_role("sending an event")]
            [position] = await self._retrying("sending an event",
                                              lambda: self._send([raw], stream))
        finally:
            self._in_flight -= 1
        ticket.position = position
        self.expect(position)
        return ticket

    async def _ride(self, raw: bytes, ticket: Ticket) -> Ticket:
        """Queue the event for the next shared pipeline and wait until it is sent."""
        sent: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self._queued.append((raw, ticket, sent))
        if self._sender is None:
            self._sender = asyncio.create_task(self._send_queued())
        await sent
        return ticket

    async def _send_queued(self) -> None:
        """Send what is queued, one pipeline per round trip, until nothing is."""
        self._in_flight += 1
        try:
            while self._queued:
                queued, self._queued = self._queued, []
                await self._send_pipeline(queued)
        finally:
            self._in_flight -= 1
            self._sender = None

    async def _send_pipeline(self, queued: list[tuple[bytes, Ticket, asyncio.Future[None]]]
                             ) -> None:
        raws = [raw for raw, _, _ in queued]
        tickets = [ticket for _, ticket, _ in queued]
        waiting = [sent for _, _, sent in queued]
        action = f"sending {len(raws)} events"
        try:
            stream = STREAM_OF_ROLE[await self.resolve_role(action)]
            ids = await self._retrying(action, lambda: self._send(raws, stream))
        except BaseException as exc:
            for ticket in tickets:
                ticket.failed = True
            _settle(waiting, exc)
            if not isinstance(exc, Exception):
                raise  # cancelled: its senders were told
            return
        self._placed(tickets, ids)
        _settle(waiting, None)

    async def send_many(self, events: Sequence[Event]) -> list[Ticket]:
        """Send ``events`` in as few round trips as possible; their tickets, in order."""
        async with self.batched():
            return [await self.send(event) for event in events]

    def _send(self, raws: list[bytes], stream: str) -> Awaitable[list[Position]]:
        return send_to_inbox_async(self.redis, raws, stream, self.sender,
                                   replicas=self.wait_replicas,
                                   wait_timeout_s=self.wait_timeout_s)

    @asynccontextmanager
    async def batched(self) -> AsyncIterator[None]:
        """Buffer sends and pipeline them; everything is sent when the block ends."""
        if not self._open_buffer():
            yield
            return
        try:
            yield
        finally:
            try:
                await self._drain()
            finally:
                self._close_buffer()

    async def _drain(self) -> None:
        if not self._buffer:
            return
        action = f"sending {len(self._buffer)} events"
        stream = STREAM_OF_ROLE[await self.resolve_role(action)]
        buffer, tickets = self._take_buffer()  # others may buffer while this one is sent
        if not buffer:
            return  # a concurrent drain took them while the role was asked
        try:
            ids = await self._retrying(action, lambda: self._send(buffer, stream))
        except BaseException:
            for ticket in tickets:
                ticket.failed = True
            raise
        self._placed(tickets, ids)

    def _retrying(self, action: str, call: Callable[[], Awaitable[T]]) -> Awaitable[T]:
        return retrying_async(self.url, action, call, retry_for_s=self.retry_for_s,
                              on_retry=self._count_retry)

    async def flush(self, timeout: float = 10.0) -> None:
        """As :meth:`Outbox.flush`. Cancelling it loses nothing: the events are in Redis
        already (or in the ``batched`` buffer, sent when its block ends)."""
        if self._buffer:
            await self._drain()
        await drive_async(self._flush_op(timeout), self._answer)

    async def _answer(self, request: Request) -> Any:
        if isinstance(request, Sleep):
            return await asyncio.sleep(request.seconds)
        try:
            return await self._poll()
        except BrokerError as exc:
            return exc

    async def _poll(self) -> tuple[Position | None, list[tuple[bytes, Rejection]]]:
        key, start = self._rejections_since()
        stream = STREAM_OF_ROLE[await self.resolve_role("reading the commit position")]
        with translated(self.url, "reading the commit position"):
            pipe = self.redis.pipeline(transaction=False)
            pipe.get(commit_key(stream))
            pipe.xrange(key, min=start)
            value, entries = await pipe.execute()
        return self._polled(value, entries)

    async def committed(self) -> Position | None:
        """The writer's commit position in this client's inbox (None: nothing yet)."""
        stream = STREAM_OF_ROLE[await self.resolve_role("reading the commit position")]
        with translated(self.url, "reading the commit position"):
            value = await self.redis.get(commit_key(stream))
        return None if value is None else stream_position(value)


def _settle(waiting: list[asyncio.Future[None]], error: BaseException | None) -> None:
    """Tell the senders of a pipeline how it went (one that gave up waiting is skipped)."""
    for sent in waiting:
        if sent.done():
            continue
        if error is None:
            sent.set_result(None)
        else:
            sent.set_exception(error)
