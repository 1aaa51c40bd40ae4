"""Sending events to the writer, and waiting until the writer has committed them.

Every entry carries this outbox's sender id; the writer reports each entry it rejects
under that id (:mod:`memq.rejections`), and :meth:`Outbox.flush` raises them as
:class:`~memq.errors.EventsRejected` once it has seen its last entry committed.

Redis restarting: a send whose connection is refused or dropped is retried with backoff for
``[client] retry_for_s`` (5 s by default), and only then raises :class:`BrokerError`; a
restart of a few seconds is invisible to the caller, who waits instead. Retrying is safe
because an event keeps its id: if Redis took an XADD whose reply was lost, the second copy
is a no-op for the writer. :meth:`Outbox.flush` rides out a restart the same way, within
its own timeout. Any other Redis error (a refused command, refused credentials) is raised
at once.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any, TypeVar

import redis

from memq import acl, names
from memq.authority import STREAM_OF_ROLE, Role
from memq.broker import MAX_RETRY_DELAY_S, is_transient, retrying, translated
from memq.config import ClientConfig, LimitsConfig
from memq.errors import BrokerError, EventsRejected, FlushTimeout, ValidationError
from memq.events import Event, encode
from memq.inbox import (
    Position as Position,  # re-exported: where the clients find it
)
from memq.inbox import send_to_inbox, stream_position
from memq.logs import redact_url
from memq.producers.ops import Op, Poll, Request, Sleep, drive
from memq.rejections import Rejection, describe, new_sender, sent_as

PIPELINE_SIZE = 500
"""Entries per round trip inside :meth:`Outbox.batched` (one XADD costs ~100 µs alone)."""

T = TypeVar("T")

QUICK_POLL_S = 0.01
"""The longest pause between two looks at the commit position in a flush's first
second: a commit is usually milliseconds away, and pauses growing to 50 ms made a commit
20 ms away look 30 ms away, 35 ms away 60 (bench/forget_stall.py)."""
PATIENT_POLL_S = 0.05
"""The pause after that second: a writer that far behind is not missed by 50 ms."""


@dataclass
class Ticket:
    """Where one sent event went: its inbox position once Redis has it."""

    event_id: str
    position: Position | None = None
    """None while the event waits in a :meth:`Outbox.batched` buffer."""
    failed: bool = False
    """The buffer it waited in could not be sent: the event never reached Redis."""

    def settled(self, committed: Position | None) -> bool:
        """Whether the writer is done with the event (committed or rejected), given its
        commit position; an event whose fate is unknown is not settled."""
        if self.failed:
            return True
        if self.position is None or committed is None:
            return False
        return self.position <= committed


class OutboxState:
    """What an outbox remembers and decides, without I/O: shared by :class:`Outbox` and
    :class:`~producers.aio_outbox.AsyncOutbox`, which do the sending and the waiting.

    The role is the one Redis says these credentials hold (``ACL WHOAMI``, asked once, on
    first need): an agent's events go to ``memq:inbox``, a worker's to
    ``memq:inbox:worker``, anyone else's to ``memq:inbox:admin`` (see :mod:`memq.acl`).
    """

    def __init__(
        self, url: str, *, retry_for_s: float = ClientConfig.retry_for_s,
        max_event_bytes: int = LimitsConfig.max_payload_bytes,
        wait_replicas: int = 0, wait_timeout_s: float = ClientConfig.wait_timeout_s,
    ) -> None:
        self.url = url
        self.retry_for_s = retry_for_s
        self.wait_replicas = wait_replicas
        """Replicas that must confirm each send before it returns (``[client]``)."""
        self.wait_timeout_s = wait_timeout_s
        self.max_event_bytes = max_event_bytes
        self.last_sent: Position | None = None
        self.retried = 0
        """Attempts that met an unreachable Redis and were tried again."""
        self._buffer: list[bytes] | None = None
        self._tickets: list[Ticket] = []
        self.sender = new_sender()
        self.acting_for: str | None = None
        """The API key this outbox sends for (``memq serve``): the writer checks each
        event against its grant and records it (``memq audit``)."""
        """Under this id the writer reports the entries it rejects."""
        self._reported = "0-0"
        """The last of this sender's rejections already raised by ``flush``."""
        self._role: Role | None = None

    @property
    def buffered(self) -> int:
        """Events sent inside ``batched`` and not yet handed to Redis."""
        return len(self._buffer or ())

    def _prepare(self, event: Event) -> tuple[bytes, Ticket]:
        """The wire form of ``event`` and its ticket; refused here if the writer would."""
        raw = encode(event)
        if len(raw) > self.max_event_bytes:
            # The writer would set it aside: refuse it here, where the caller sees why.
            raise ValidationError(
                f"event is {len(raw)} bytes, over the {self.max_event_bytes} limit")
        return raw, Ticket(event.id)

    def _buffer_event(self, raw: bytes, ticket: Ticket) -> bool:
        """Keep it for the pipeline, inside ``batched``; True when the buffer is full."""
        assert self._buffer is not None
        self._buffer.append(raw)
        self._tickets.append(ticket)
        return len(self._buffer) >= PIPELINE_SIZE

    def _open_buffer(self) -> bool:
        """Start buffering; False inside a ``batched`` block already (nested blocks)."""
        if self._buffer is not None:
            return False
        self._buffer = []
        return True

    def _take_buffer(self) -> tuple[list[bytes], list[Ticket]]:
        """The buffered events, handed to one pipeline; the buffer starts again empty, so
        events buffered while the pipeline is on its way wait for the next one."""
        taken = (self._buffer or [], self._tickets)
        if self._buffer is not None:
            self._buffer = []
        self._tickets = []
        return taken

    def _close_buffer(self) -> None:
        self._buffer = None
        for ticket in self._tickets:  # left behind by a drain that failed
            ticket.failed = True
        self._tickets = []

    def _placed(self, tickets: list[Ticket], positions: list[Position]) -> None:
        """Record where a pipeline's events went."""
        for ticket, position in zip(tickets, positions, strict=True):
            ticket.position = position
        self.expect(positions[-1])

    def _count_retry(self) -> None:
        self.retried += 1

    def expect(self, position: Position) -> None:
        """Have the next :meth:`flush` wait for ``position`` of this outbox's stream too:
        entries sent under this sender by another outbox (``memq serve`` on behalf of a
        remote client, through another server or before a restart)."""
        if self.last_sent is None or position > self.last_sent:
            self.last_sent = position

    def _flush_op(self, timeout: float) -> Op[None]:
        """Wait until the writer has committed everything sent so far: ``Poll`` answered
        with (position, rejections) or the :class:`BrokerError` met; ``Sleep`` between."""
        target = self.last_sent
        if target is None:
            return
        began = time.monotonic()
        deadline, delay = began + timeout, 0.002
        while True:
            unreachable: BaseException | None = None
            polled = yield Poll()
            if isinstance(polled, BrokerError):
                if polled.__cause__ is None or not is_transient(polled.__cause__):
                    raise polled
                committed, rejections, unreachable = None, [], polled.__cause__
            else:
                committed, rejections = polled
            if committed is not None and committed >= target:
                self._raise_rejections(rejections)
                return
            if time.monotonic() >= deadline:
                raise self._flush_failure(target, committed, timeout, unreachable)
            yield Sleep(delay)
            cap = QUICK_POLL_S if time.monotonic() - began < 1.0 else PATIENT_POLL_S
            delay = min(cap if unreachable is None else MAX_RETRY_DELAY_S, delay * 2)

    def _polled(self, value: bytes | None, entries: list[Any]
                ) -> tuple[Position | None, list[tuple[bytes, Rejection]]]:
        """A poll's replies: the commit position, then this sender's rejections not yet
        raised (read in that order, on one connection: the writer moves the position and
        reports the rejections in one transaction, so every rejection up to the position
        read is there)."""
        rejections = [(entry_id, Rejection.from_fields(fields)) for entry_id, fields in entries]
        return (None if value is None else stream_position(value)), rejections

    def _commit_key(self, stream: str) -> str:
        """Where the writer says how far it committed what this outbox sends to ``stream``:
        for a key's events, how many of its key's items (the keys' queue is relayed key by
        key in turn, store/write/relay.py); else its queue's or stream's position."""
        if stream == names.KEYS_INBOX_STREAM:
            return names.key_count(sent_as(self.sender, self.acting_for), "committed")
        return commit_key(stream)

    def _rejections_since(self) -> tuple[str, str]:
        """The key and the XRANGE start of this sender's rejections not yet raised."""
        return names.rejections_key(self.sender), f"({self._reported}"

    def _raise_rejections(self, found: list[tuple[bytes, Rejection]]) -> None:
        if not found:
            return
        self._reported = found[-1][0].decode()
        rejections = [rejection for _, rejection in found]
        raise EventsRejected(describe(rejections), rejections)

    def _flush_failure(
        self, target: Position, committed: Position | None, timeout: float,
        unreachable: BaseException | None,
    ) -> Exception:
        if unreachable is not None:
            return BrokerError(
                f"waiting for the writer failed: Redis at {redact_url(self.url)} did not "
                f"answer within {timeout:g} s ({unreachable})")
        return FlushTimeout(
            f"the writer has not committed entry {target[0]}-{target[1]} within "
            f"{timeout:g} s (last committed: {_fmt(committed)}); is `memq writer` running?"
        )


class Outbox(OutboxState):
    """Sends events to its role's inbox and remembers the last one, for :meth:`flush`."""

    def __init__(
        self, broker: redis.Redis, url: str, *, retry_for_s: float = ClientConfig.retry_for_s,
        max_event_bytes: int = LimitsConfig.max_payload_bytes,
        wait_replicas: int = 0, wait_timeout_s: float = ClientConfig.wait_timeout_s,
    ) -> None:
        super().__init__(url, retry_for_s=retry_for_s, max_event_bytes=max_event_bytes,
                         wait_replicas=wait_replicas, wait_timeout_s=wait_timeout_s)
        self.redis = broker

    @property
    def role(self) -> Role:
        """The role of this outbox's Redis credentials."""
        return self.resolve_role("asking Redis who this client is")

    def resolve_role(self, action: str) -> Role:
        """:attr:`role`, asked once; a failure names ``action`` (what the caller was doing).
        Acting for a key, an agent's: its events are judged with an agent's rights."""
        if self.acting_for is not None:
            return Role.AGENT
        if self._role is None:
            self._role = self._retrying(action, lambda: acl.role_of(self.redis))
        return self._role

    @property
    def stream(self) -> str:
        """The inbox stream this outbox writes to: its role's, or the keys' one."""
        return self._stream_of(self.role)

    def _stream_of(self, role: Role) -> str:
        return names.KEYS_INBOX_STREAM if self.acting_for is not None else STREAM_OF_ROLE[role]

    def send(self, event: Event) -> Ticket:
        """Send ``event`` (or buffer it, inside :meth:`batched`); its ticket says where."""
        raw, ticket = self._prepare(event)
        if self._buffer is not None:
            if self._buffer_event(raw, ticket):
                self._drain()
            return ticket
        stream = self._stream_of(self.resolve_role("sending an event"))
        [position] = self._retrying("sending an event", lambda: self._send([raw], stream))
        ticket.position = position
        self.expect(position)
        return ticket

    def send_many(self, events: Sequence[Event]) -> list[Ticket]:
        """Send ``events`` in as few round trips as possible; their tickets, in order."""
        with self.batched():
            return [self.send(event) for event in events]

    def _send(self, raws: list[bytes], stream: str) -> list[Position]:
        return send_to_inbox(self.redis, raws, stream, sent_as(self.sender, self.acting_for),
                             replicas=self.wait_replicas, wait_timeout_s=self.wait_timeout_s)

    @contextmanager
    def batched(self) -> Iterator[None]:
        """Buffer sends and pipeline them; everything is sent when the block ends."""
        if not self._open_buffer():
            yield
            return
        try:
            yield
        finally:
            try:
                self._drain()
            finally:
                self._close_buffer()

    def _drain(self) -> None:
        if not self._buffer:
            return
        action = f"sending {len(self._buffer)} events"
        stream = self._stream_of(self.resolve_role(action))
        buffer, tickets = self._take_buffer()
        try:
            ids = self._retrying(action, lambda: self._send(buffer, stream))
        except BaseException:
            for ticket in tickets:
                ticket.failed = True
            raise
        self._placed(tickets, ids)

    def _retrying(self, action: str, call: Callable[[], T]) -> T:
        return retrying(self.url, action, call, retry_for_s=self.retry_for_s,
                        on_retry=self._count_retry)

    def flush(self, timeout: float = 10.0) -> None:
        """Return once the writer has committed everything sent so far.

        Raises :class:`EventsRejected` if the writer set aside any of it (each rejection is
        raised once), :class:`FlushTimeout` if the writer is behind when ``timeout`` runs
        out, or :class:`BrokerError` if Redis was still unreachable then.
        """
        if self._buffer:
            self._drain()
        drive(self._flush_op(timeout), self._answer)

    def _answer(self, request: Request) -> Any:
        if isinstance(request, Sleep):
            return time.sleep(request.seconds)
        try:
            return self._poll()
        except BrokerError as exc:
            return exc

    def _poll(self) -> tuple[Position | None, list[tuple[bytes, Rejection]]]:
        key, start = self._rejections_since()
        with translated(self.url, "reading the commit position"):
            pipe = self.redis.pipeline(transaction=False)
            pipe.get(self._commit_key(self.stream))
            pipe.xrange(key, min=start)
            value, entries = pipe.execute()
        return self._polled(value, entries)

    def committed(self) -> Position | None:
        key = self._commit_key(self.stream)
        with translated(self.url, "reading the commit position"):
            value = self.redis.get(key)
        return None if value is None else stream_position(value)


def commit_key(stream: str) -> str:
    """The key holding how far the writer has committed what a role sends to ``stream``:
    its queue's committed ordinal, or the stream's committed entry id (admin)."""
    if stream in names.INBOX_QUEUES:
        return names.COMMITTED_ORDINAL_KEYS[stream]
    return names.COMMITTED_KEYS[stream]


def _fmt(position: Position | None) -> str:
    return "none" if position is None else f"{position[0]}-{position[1]}"
