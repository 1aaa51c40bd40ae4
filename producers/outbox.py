"""Sending events to the writer, and waiting until the writer has committed them."""

from __future__ import annotations

import time
from collections.abc import Iterator
from contextlib import contextmanager

import redis

from memq import names
from memq.broker import translated
from memq.errors import FlushTimeout
from memq.events import Event, encode

PIPELINE_SIZE = 500
"""Entries per round trip inside :meth:`Outbox.batched` (one XADD costs ~100 µs alone)."""


def stream_position(stream_id: bytes | str) -> tuple[int, int]:
    text = stream_id.decode() if isinstance(stream_id, bytes) else stream_id
    ms, _, seq = text.partition("-")
    return int(ms), int(seq or 0)


class Outbox:
    """XADDs events to ``memq:inbox`` and remembers the last one, for :meth:`flush`."""

    def __init__(self, broker: redis.Redis, url: str) -> None:
        self.redis = broker
        self.url = url
        self.last_sent: tuple[int, int] | None = None
        self._buffer: list[bytes] | None = None

    @property
    def buffered(self) -> int:
        """Events sent inside :meth:`batched` and not yet handed to Redis."""
        return len(self._buffer or ())

    def send(self, event: Event) -> None:
        raw = encode(event)
        if self._buffer is not None:
            self._buffer.append(raw)
            if len(self._buffer) >= PIPELINE_SIZE:
                self._drain()
            return
        with translated(self.url, "sending an event"):
            stream_id = self.redis.xadd(names.INBOX_STREAM, {names.EVENT_FIELD: raw})
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
        pipe = self.redis.pipeline(transaction=False)
        for raw in self._buffer:
            pipe.xadd(names.INBOX_STREAM, {names.EVENT_FIELD: raw})
        with translated(self.url, f"sending {len(self._buffer)} events"):
            ids = pipe.execute()
        self._buffer.clear()
        self._remember(ids[-1])

    def _remember(self, stream_id: bytes | str) -> None:
        position = stream_position(stream_id)
        if self.last_sent is None or position > self.last_sent:
            self.last_sent = position

    def flush(self, timeout: float = 10.0) -> None:
        """Return once the writer has committed everything sent so far."""
        if self._buffer:
            self._drain()
        target = self.last_sent
        if target is None:
            return
        deadline = time.monotonic() + timeout
        delay = 0.002
        while True:
            committed = self.committed()
            if committed is not None and committed >= target:
                return
            if time.monotonic() >= deadline:
                raise FlushTimeout(
                    f"the writer has not committed entry {target[0]}-{target[1]} within "
                    f"{timeout:g} s (last committed: {_fmt(committed)}); is `memq writer` running?"
                )
            time.sleep(delay)
            delay = min(0.05, delay * 2)

    def committed(self) -> tuple[int, int] | None:
        with translated(self.url, "reading the commit position"):
            value = self.redis.get(names.COMMITTED_KEY)
        return None if value is None else stream_position(value)


def _fmt(position: tuple[int, int] | None) -> str:
    return "none" if position is None else f"{position[0]}-{position[1]}"
