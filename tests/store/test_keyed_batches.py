"""Keys' messages on the fast path: judged up front against their keys' grants, with the
same outcome, row for row, as one by one on the careful path."""

from __future__ import annotations

import contextlib
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from memq import names
from memq.clock import uuid7
from memq.events import Event, encode
from memq.store.write import batch
from tests.store.eventlog import EventLog, at, event

SENDER = "0" * 32
KEYS = {  # key id: (users, rights); "dead" is revoked before the batch
    "1" * 16: (["u1"], ["read", "write"]),
    "2" * 16: (["u2"], ["read", "write"]),
    "3" * 16: (None, ["read", "write"]),
    "4" * 16: (None, ["read", "write"]),
    "5" * 16: (None, ["read"]),
}
REVOKED = "4" * 16


def setup() -> list[Event]:
    """Five keys, one revoked, and sessions s1 of u1 and s2 of u2."""
    return [*[event("key.created", {"key_id": key, "name": f"k{key[0]}",
                                    "secret_sha256": key[0] * 64, "users": users,
                                    "rights": rights}) for key, (users, rights) in KEYS.items()],
            event("key.revoked", {"key_id": REVOKED}),
            message("s1", "u1", 0), message("s2", "u2", 0)]


@contextlib.contextmanager
def granted_log(events: list[Event] | None = None) -> Iterator[EventLog]:
    """A database after ``events`` (:func:`setup`'s when None)."""
    with tempfile.TemporaryDirectory() as tmp:
        log = EventLog(Path(tmp))
        log.send(*(events or setup()))
        try:
            yield log
        finally:
            log.close()


def message(session: str, user: str | None, minute: int) -> Event:
    payload: dict[str, Any] = {"message_id": uuid7(), "role": "user", "importance": 0.5,
                               "content": f"turn at {minute} in {session}"}
    if user is not None:
        payload["user_id"] = user
    return event("message.appended", payload, session=session, created_at=at(minute))


def send_keyed(log: EventLog, sent: list[tuple[str | None, Event]]) -> None:
    """One batch: each event sent for its key, or by a trusted agent host when None."""
    entries = [batch.Entry(names.INBOX_STREAM if key is None else names.KEYS_INBOX_STREAM,
                           f"{n + 1}-0".encode(),
                           {names.EVENT_FIELD: encode(e), names.SENDER_FIELD: (
                               SENDER if key is None else f"{SENDER}:{key}").encode()})
               for n, (key, e) in enumerate(sent)]
    decoded = batch.decode_entries(entries, log.writer.config.limits)
    log.writer.apply_batch(decoded, entries[-1].id.decode())


def outcome(log: EventLog) -> tuple[Any, ...]:
    return (log.dump(), sorted(log.rejections()),
            log.rows("SELECT e.event_id, k.key_id FROM event_keys AS k "
                     "JOIN events AS e USING (seq) ORDER BY 1"))


def careful_only(monkeypatch: pytest.MonkeyPatch) -> None:
    def refuse(*_: object) -> None:
        raise batch.RetryCarefully("this test's other path")
    monkeypatch.setattr(batch, "apply_fast", refuse)


# Each turn sent for a key, or by a trusted agent host (None), which may claim a session too.
turns = st.lists(st.tuples(st.sampled_from([*sorted(KEYS), None]),
                           st.sampled_from(["s1", "s2", "s3"]),
                           st.sampled_from([None, "u1", "u2"])), min_size=1, max_size=12)


@settings(max_examples=60, deadline=None)
@given(sent=turns)
def test_a_keys_batch_has_the_same_outcome_judged_up_front_as_one_by_one(
    sent: list[tuple[str | None, str, str | None]]
) -> None:
    events = [(key, message(session, user, 1 + n)) for n, (key, session, user)
              in enumerate(sent)]
    before = setup()
    with granted_log(before) as fast, granted_log(before) as careful:
        send_keyed(fast, events)
        with pytest.MonkeyPatch.context() as patch:
            careful_only(patch)
            send_keyed(careful, events)
        assert outcome(fast) == outcome(careful)


def test_messages_to_owned_sessions_take_the_fast_path_and_each_refusal_is_kept(
    monkeypatch: pytest.MonkeyPatch
) -> None:
    def no_careful(*_: object) -> None:
        raise AssertionError("took the careful path")
    monkeypatch.setattr(batch, "apply_careful", no_careful)
    with granted_log() as log:
        send_keyed(log, [("1" * 16, message("s1", None, 1)), ("1" * 16, message("s2", None, 2)),
                         (REVOKED, message("s1", None, 3)), ("5" * 16, message("s1", None, 4)),
                         ("3" * 16, message("s2", "u2", 5))])
        assert [r[0] for r in log.rows("SELECT content FROM messages ORDER BY seq")][2:] == [
            "turn at 1 in s1", "turn at 5 in s2"]
        [(revoked_at,)] = log.rows("SELECT revoked_at FROM api_keys WHERE id = ?", REVOKED)
        assert sorted(log.rejections()) == sorted([
            f"message.appended: session 's2' of a user outside key {'1' * 16}'s grant",
            f"sent for key {REVOKED}, revoked at {revoked_at}",
            f"key {'5' * 16} may not write"])
        assert len(log.rows("SELECT * FROM event_keys")) == 2


def test_a_message_to_a_session_without_its_owner_yet_is_judged_one_by_one(
    monkeypatch: pytest.MonkeyPatch
) -> None:
    taken = []
    careful = batch.apply_careful
    monkeypatch.setattr(batch, "apply_careful", lambda *a: (taken.append(1), careful(*a)))
    with granted_log() as log:
        send_keyed(log, [("1" * 16, message("s3", "u1", 1)), ("2" * 16, message("s3", None, 2))])
        assert taken == [1]
        assert log.rejections() == [
            f"message.appended: session 's3' of a user outside key {'2' * 16}'s grant"]


def test_an_event_a_key_may_not_send_is_set_aside_and_the_same_from_a_host_applied() -> None:
    """Judged by its place in the batch, not its id: the key's copy of an event does not
    take the host's with it, nor is the host's recorded as the key's."""
    before = setup()
    same = message("s1", None, 1)
    for sent in ([("5" * 16, same), (None, same)], [(None, same), ("5" * 16, same)]):
        with granted_log(before) as fast, granted_log(before) as careful:
            send_keyed(fast, sent)  # type: ignore[arg-type]
            with pytest.MonkeyPatch.context() as patch:
                careful_only(patch)
                send_keyed(careful, sent)  # type: ignore[arg-type]
            assert outcome(fast) == outcome(careful)
            assert fast.rows("SELECT content FROM messages WHERE id = ?",
                             same.payload["message_id"]) == [("turn at 1 in s1",)]
            assert fast.rejections() == [f"key {'5' * 16} may not write"]
            assert fast.rows("SELECT * FROM event_keys") == []
