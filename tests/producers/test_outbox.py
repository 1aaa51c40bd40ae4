"""flush() reports what the writer rejected: each event id and reason, as an error, once."""

from __future__ import annotations

import dataclasses
from collections.abc import Iterator
from typing import Any

import pytest
import redis

from memq import MemoryClient, names
from memq.config import Config
from memq.errors import EventsRejected, FlushTimeout
from memq.events import EventType
from memq.producers import outbox
from memq.producers.ops import Poll, Sleep, drive
from memq.rejections import REPORT_TTL_S, SHOWN_IN_MESSAGE, Rejection
from memq.testing import WriterThread

pytestmark = pytest.mark.redis


@pytest.fixture
def strict_writer(config: Config) -> Iterator[WriterThread]:
    """A writer whose size limit is smaller than the clients' (they accept 2,000 bytes)."""
    small = dataclasses.replace(config.limits, max_payload_bytes=1500)
    running = WriterThread(config.replace(limits=small))
    running.start()
    yield running
    running.stop()


def test_flush_raises_what_the_writer_rejected(
    make_client: Any, config: Config, strict_writer: WriterThread
) -> None:
    with make_client(config=config) as client:
        kept = client.append("s", "user", "fine")
        big = client.append("s", "user", "x" * 2000)
        with pytest.raises(EventsRejected) as caught:
            client.flush()
        (rejection,) = caught.value.rejections
        assert rejection.event_type == EventType.MESSAGE_APPENDED
        assert "bytes, over the 1500" in rejection.reason
        assert rejection.event_id is not None
        assert rejection.event_id in str(caught.value)
        assert "the writer rejected 1 event(s) this client sent" in str(caught.value)
        # The rejected turn is gone from the client's reads; the good one was committed.
        assert [m.id for m in client.history("s")] == [kept]
        assert big not in [item.id for item in client.get_context("s")]
        # Reported once: the next flush, with nothing new rejected, succeeds.
        client.append("s", "user", "after")
        client.flush()


def test_a_rejection_is_reported_to_its_sender_only(
    make_client: Any, config: Config, strict_writer: WriterThread
) -> None:
    with make_client(config=config) as bad, make_client(config=config) as good:
        bad.set_fact("c", "k", "v" * 1900)
        good.set_fact("c", "other", "fine")
        good.flush()
        with pytest.raises(EventsRejected, match=r"fact\.set"):
            bad.flush()
        assert [f.key for f in bad.facts()] == ["other"]  # the rejected value left the overlay


def test_an_event_refused_when_applied_is_reported_too(
    client: MemoryClient, writer: WriterThread
) -> None:
    # Past the client's checks (sent as is), refused by the projection: the careful path.
    client._send(EventType.TASK_CHANGED, {"task_id": "no-such-task", "paused": True})
    with pytest.raises(EventsRejected, match=r"task.changed\): unknown task no-such-task"):
        client.flush()


def test_many_rejections_are_all_carried_and_a_few_named(
    make_client: Any, config: Config, strict_writer: WriterThread
) -> None:
    with make_client(config=config) as client:
        with client.batched():
            for i in range(SHOWN_IN_MESSAGE + 3):
                client.append("s", "user", f"{i} " + "x" * 2000)
        with pytest.raises(EventsRejected) as caught:
            client.flush()
    assert len(caught.value.rejections) == SHOWN_IN_MESSAGE + 3
    assert str(caught.value).endswith("; and 3 more (see `memq rejected list`)")


def test_the_writer_reports_in_a_capped_expiring_stream(
    make_client: Any, config: Config, strict_writer: WriterThread
) -> None:
    broker = redis.Redis.from_url(config.redis_url)
    with make_client(config=config) as client:
        client.append("s", "user", "x" * 2000)
        with pytest.raises(EventsRejected):
            client.flush()
        key = names.rejections_key(client.outbox.sender)
    assert 0 < broker.ttl(key) <= REPORT_TTL_S
    ((entry_id, fields),) = broker.xrange(key)
    assert Rejection.from_fields(fields).entry_id != entry_id.decode()  # the inbox entry's
    assert broker.xlen(key) == 1


def test_entries_without_a_sender_are_reported_nowhere(
    make_client: Any, config: Config, strict_writer: WriterThread
) -> None:
    broker = redis.Redis.from_url(config.redis_url)
    broker.xadd(names.INBOX_STREAM, {names.EVENT_FIELD: b"not json"})
    with make_client(config=config) as client:
        client.append("s", "user", "fine")
        client.flush()
    assert list(broker.scan_iter(f"{names.REJECTIONS_PREFIX}*")) == []


@pytest.mark.parametrize("sender", [b"", b"ABC", b"0" * 31, b"0" * 33, "é".encode() * 16,
                                    b"0123456789abcdef0123456789abcde\n"])
def test_a_malformed_sender_sets_the_entry_aside(
    client: MemoryClient, writer: WriterThread, sender: bytes
) -> None:
    client.append("s", "user", "before")
    client.flush()
    client.redis.xadd(names.INBOX_STREAM, {
        names.EVENT_FIELD: b"{}", names.SENDER_FIELD: sender})
    client.append("s", "user", "after")
    client.flush()  # nothing of the neighbour's rejection reaches this client
    rows = client.readers
    with rows.connection() as conn:
        reasons = [r[0] for r in conn.execute("SELECT reason FROM rejected_events")]
    assert len(reasons) == 1
    assert reasons[0].startswith("sender must be 32 lowercase hex digits")


def test_a_flush_looks_often_in_its_first_second_then_patiently(
    config: Config, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A commit is usually milliseconds away: pauses of 50 ms showed as 30-60 ms of lag."""
    clock = [0.0]
    monkeypatch.setattr(outbox.time, "monotonic", lambda: clock[0])
    pauses: list[tuple[float, float]] = []

    def answer(request: object) -> object:
        if isinstance(request, Sleep):
            pauses.append((clock[0], request.seconds))
            clock[0] += request.seconds
            return None
        assert isinstance(request, Poll)
        return (0, 0), []  # the writer never gets there

    with MemoryClient(config=config) as client:
        client.outbox.last_sent = (10**12, 0)
        with pytest.raises(FlushTimeout):
            drive(client.outbox._flush_op(3.0), answer)
    quick = [seconds for at, seconds in pauses if at < 1.0]
    assert max(quick) == outbox.QUICK_POLL_S
    assert len(quick) > 90
    assert max(seconds for at, seconds in pauses if at >= 1.0) == outbox.PATIENT_POLL_S
