"""Sending events to the writer, and waiting until the writer has committed them.

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
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import TypeVar

import redis

from memq import names
from memq.broker import (
    MAX_RETRY_DELAY_S,
    is_transient,
    retrying,
    send_to_inbox,
    stream_position,
    translated,
)
from memq.config import ClientConfig, LimitsConfig
from memq.errors import BrokerError, FlushTimeout, ValidationError
from memq.events import Event, encode
from memq.logs import redact_url

PIPELINE_SIZE = 500
"""Entries per round trip inside :meth:`Outbox.batched` (one XADD costs ~100 µs alone)."""

T = TypeVar("T")


class Outbox:
    """XADDs events to ``memq:inbox`` and remembers the last one, for :meth:`flush`."""

    def __init__(
        self, broker: redis.Redis, url: str, *, retry_for_s: float = ClientConfig.retry_for_s,
        max_event_bytes: int = LimitsConfig.max_payload_bytes,
    ) -> None:
        self.redis = broker
        self.url = url
        self.retry_for_s = retry_for_s
        self.max_event_bytes = max_event_bytes
        self.last_sent: tuple[int, int] | None = None
        self.retried = 0
        """Attempts that met an unreachable Redis and were tried again."""
        self._buffer: list[bytes] | None = None

    @property
    def buffered(self) -> int:
        """Events sent inside :meth:`batched` and not yet handed to Redis."""
        return len(self._buffer or ())

    def send(self, event: Event) -> None:
        raw = encode(event)
        if len(raw) > self.max_event_bytes:
            # The writer would set it aside: refuse it here, where the caller sees why.
            raise ValidationError(
                f"event is {len(raw)} bytes, over the {self.max_event_bytes} limit")
        if self._buffer is not None:
            self._buffer.append(raw)
            if len(self._buffer) >= PIPELINE_SIZE:
                self._drain()
            return
        stream_id = self._retrying("sending an event", lambda: self.redis.xadd(
            names.INBOX_STREAM, {names.EVENT_FIELD: raw}))
        self._remember(stream_id)

    @contextmanager
    def batched(self) -> Iterator[None]:
        """Buffer sends and pipeline them; everything is sent when the block ends."""
        if self._buffer is not None:
            yield
            return
        self._buffer = []
        try:
            yield
        finally:
            try:
                self._drain()
            finally:
                self._buffer = None

    def _drain(self) -> None:
        if not self._buffer:
            return
        buffer = self._buffer
        ids = self._retrying(f"sending {len(buffer)} events",
                             lambda: send_to_inbox(self.redis, buffer))
        buffer.clear()
        self._remember(ids[-1])

    def _retrying(self, action: str, call: Callable[[], T]) -> T:
        return retrying(self.url, action, call, retry_for_s=self.retry_for_s,
                        on_retry=self._count_retry)

    def _count_retry(self) -> None:
        self.retried += 1

    def _remember(self, stream_id: bytes | str) -> None:
        position = stream_position(stream_id)
        if self.last_sent is None or position > self.last_sent:
            self.last_sent = position

    def flush(self, timeout: float = 10.0) -> None:
        """Return once the writer has committed everything sent so far.

        Raises :class:`FlushTimeout` if the writer is behind when ``timeout`` runs out, or
        :class:`BrokerError` if Redis was still unreachable then.
        """
        if self._buffer:
            self._drain()
        target = self.last_sent
        if target is None:
            return
        deadline = time.monotonic() + timeout
        delay = 0.002
        while True:
            unreachable: BaseException | None = None
            try:
                committed = self.committed()
            except BrokerError as exc:
                if exc.__cause__ is None or not is_transient(exc.__cause__):
                    raise
                committed, unreachable = None, exc.__cause__
            if committed is not None and committed >= target:
                return
            if time.monotonic() >= deadline:
                raise self._flush_failure(target, committed, timeout, unreachable)
            time.sleep(delay)
            delay = min(0.05 if unreachable is None else MAX_RETRY_DELAY_S, delay * 2)

    def _flush_failure(
        self, target: tuple[int, int], committed: tuple[int, int] | None, timeout: float,
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

    def committed(self) -> tuple[int, int] | None:
        with translated(self.url, "reading the commit position"):
            value = self.redis.get(names.COMMITTED_KEY)
        return None if value is None else stream_position(value)


def _fmt(position: tuple[int, int] | None) -> str:
    return "none" if position is None else f"{position[0]}-{position[1]}"
