"""The documents projection: upsert, delete, expiry by the events' own times, touch,
forgetting a user, and a rebuild that gives the same rows."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from memq.events import EventType
from memq.store.read.documents import documents_under, get_document, namespaces
from tests.store.eventlog import EventLog, at, event


@pytest.fixture
def log(tmp_path: Path) -> Iterator[EventLog]:
    db = EventLog(tmp_path)
    yield db
    db.close()


def put(key: str, value: dict[str, Any], *, minute: int = 0, ttl: float | None = None,
        namespace: tuple[str, ...] = ("notes",), user: str | None = None):
    payload: dict[str, Any] = {"namespace": list(namespace), "key": key, "value": value}
    if ttl is not None:
        payload["ttl_minutes"] = ttl
    if user is not None:
        payload["user_id"] = user
    return event(EventType.DOCUMENT_PUT, payload, created_at=at(minute))


def named(etype: str, key: str, *, minute: int = 0, user: str | None = None):
    payload: dict[str, Any] = {"namespace": ["notes"], "key": key}
    if user is not None:
        payload["user_id"] = user
    return event(etype, payload, created_at=at(minute))


def keys(log: EventLog) -> list[str]:
    return [r[0] for r in log.rows("SELECT key FROM documents ORDER BY key")]


def test_upsert_keeps_created_at_and_delete_removes(log: EventLog) -> None:
    log.send(put("a", {"v": 1}, minute=1), put("a", {"v": 2}, minute=3), put("b", {"v": 3}))
    found = get_document(log.reader(), ("notes",), "a", user_id=None, now=at(4))
    assert found is not None
    assert (found.value, found.created_at, found.updated_at) == ({"v": 2}, at(1), at(3))
    log.send(named(EventType.DOCUMENT_DELETED, "a", minute=5))
    assert keys(log) == ["b"]
    log.assert_rebuild_equal()


def test_expiry_follows_the_events_times_and_touch_restarts_it(log: EventLog) -> None:
    log.send(put("short", {}, minute=0, ttl=5), put("long", {}, minute=0, ttl=60),
             put("kept", {}, minute=0))
    assert [d.key for d in documents_under(log.reader(), ("notes",), user_id=None,
                                           now=at(10))] == ["kept", "long"]
    assert keys(log) == ["kept", "long", "short"]  # no document event after minute 5 yet
    log.send(named(EventType.DOCUMENT_TOUCHED, "long", minute=30))
    assert keys(log) == ["kept", "long"]
    log.send(put("later", {}, minute=70))  # long was touched at 30: lives until 90
    assert keys(log) == ["kept", "later", "long"]
    log.send(put("latest", {}, minute=91))
    assert keys(log) == ["kept", "later", "latest"]
    log.assert_rebuild_equal()


def test_a_users_documents_are_theirs_and_forgetting_erases_them(log: EventLog) -> None:
    log.send(put("a", {"secret": "alice's"}, user="alice"), put("a", {"v": "global"}),
             put("a", {"v": "bob's"}, user="bob"))
    reader = log.reader()
    alice = get_document(reader, ("notes",), "a", user_id="alice", now=at(1))
    assert alice is not None
    assert alice.value == {"secret": "alice's"}
    assert namespaces(reader, user_id="carol", now=at(1)) == []
    log.send(event(EventType.USER_FORGOTTEN, {"user_id": "alice"}, created_at=at(2)))
    assert log.rows("SELECT user_id FROM documents ORDER BY user_id") == [(None,), ("bob",)]
    payloads = [r[0] for r in log.rows(
        "SELECT payload FROM events WHERE type = 'document.put' ORDER BY seq")]
    assert payloads[0] == "{}"
    assert "alice's" not in "".join(payloads)
    log.assert_rebuild_equal()


def test_prefixes_match_whole_labels(log: EventLog) -> None:
    log.send(put("1", {}, namespace=("a", "b")), put("2", {}, namespace=("a", "bc")),
             put("3", {}, namespace=("a",)), put("4", {}, namespace=("ab",)))
    under = documents_under(log.reader(), ("a",), user_id=None, now=at(1))
    assert sorted(d.key for d in under) == ["1", "2", "3"]
    under_b = documents_under(log.reader(), ("a", "b"), user_id=None, now=at(1))
    assert [d.key for d in under_b] == ["1"]
