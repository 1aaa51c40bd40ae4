"""The writer's prefetcher: batches read ahead are committed together, in stream order."""

from __future__ import annotations

import threading

from memq import names
from memq.config import Config
from memq.store.write.batch import Decoded, Entry
from memq.store.write.inbox import Prefetched, Prefetcher


def batch(*ids: str) -> Prefetched:
    entries = [Entry(names.INBOX_STREAM, i.encode(), {}) for i in ids]
    decoded = [Decoded(names.INBOX_STREAM, i, b"", None, None, "test") for i in ids]
    return entries, decoded


def prefetcher() -> Prefetcher:
    return Prefetcher(inbox=None, config=Config(), stop=threading.Event())  # type: ignore[arg-type]


def test_batches_waiting_behind_are_joined_in_order() -> None:
    ahead = prefetcher()
    for item in (batch("1-0", "2-0"), batch("3-0"), batch("4-0", "5-0")):
        ahead.ready.put(item)
    entries, decoded = ahead.get(timeout=0.1) or ([], [])
    assert [e.id for e in entries] == [b"1-0", b"2-0", b"3-0", b"4-0", b"5-0"]
    assert [d.stream_id for d in decoded] == ["1-0", "2-0", "3-0", "4-0", "5-0"]
    assert ahead.get(timeout=0.01) is None


def test_a_batch_alone_is_not_held_back() -> None:
    ahead = prefetcher()
    ahead.ready.put(batch("1-0"))
    entries, _ = ahead.get(timeout=0.1) or ([], [])
    assert [e.id for e in entries] == [b"1-0"]


def test_at_most_ahead_batches_are_joined() -> None:
    ahead = prefetcher()
    for i in range(Prefetcher.AHEAD):
        ahead.ready.put(batch(f"{i}-0"))
    assert ahead.ready.full()  # the reader waits here: memory stays bounded
    entries, _ = ahead.get(timeout=0.1) or ([], [])
    assert len(entries) == Prefetcher.AHEAD
