"""The documents projection: upsert, delete, expiry by the events' own times, touch,
forgetting a user, and a rebuild that gives the same rows."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import orjson
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from memq.events import EventType, rules
from memq.store import schema
from memq.store.connection import open_connection
from memq.store.projections import documents, forgetting
from memq.store.read.documents import documents_under, get_document, namespaces
from tests.store.eventlog import EventLog, at, event


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


def test_a_page_is_cut_in_the_query_and_is_the_same_slice_of_the_whole(log: EventLog) -> None:
    """A page of one document read every document under the prefix (each up to 1 MiB);
    the page is now cut by SQLite, in the same order."""
    log.send(*(put(f"k{i}", {"v": i}, minute=i % 4) for i in range(9)))
    whole = documents_under(log.reader(), ("notes",), user_id=None, now=at(5))
    assert len(whole) == 9
    for limit, offset in ((1, 0), (3, 2), (4, 7), (5, 9), (2, 20)):
        page = documents_under(log.reader(), ("notes",), user_id=None, now=at(5),
                               limit=limit, offset=offset)
        assert page == whole[offset:offset + limit], (limit, offset)


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


def live_puts(log: EventLog) -> list[tuple[Any, ...]]:
    """(user, namespace, key) of every put the log still holds a value of."""
    return log.rows("""
        SELECT DISTINCT json_extract(payload, '$.user_id'), json_extract(payload, '$.namespace'),
               json_extract(payload, '$.key')
        FROM events WHERE type = 'document.put' AND erased_by IS NULL ORDER BY 1, 2, 3""")


def stored(log: EventLog) -> list[tuple[Any, ...]]:
    return log.rows("SELECT user_id, namespace, key FROM documents ORDER BY 1, 2, 3")


def test_a_deleted_documents_values_leave_the_log(log: EventLog) -> None:
    log.send(put("a", {"v": "first-7c1e"}, minute=1), put("a", {"v": "second-7c1e"}, minute=2),
             named(EventType.DOCUMENT_TOUCHED, "a", minute=3), put("b", {"v": "kept"}),
             put("a", {"v": "alice-7c1e"}, user="alice"))
    log.send(named(EventType.DOCUMENT_DELETED, "a", minute=4))
    (deleted,) = log.rows("SELECT seq FROM events WHERE type = 'document.deleted'")
    emptied = log.rows("SELECT type, payload, erased_by FROM events WHERE erased_by IS NOT NULL "
                       "ORDER BY seq")
    assert emptied == [("document.put", "{}", deleted[0])] * 2 + [
        ("document.touched", "{}", deleted[0])]
    values = "".join(r[0] for r in log.rows("SELECT payload FROM events"))
    assert "first-7c1e" not in values
    assert "second-7c1e" not in values
    assert "alice-7c1e" in values
    assert "kept" in values
    assert stored(log) == [(None, '["notes"]', "b"), ("alice", '["notes"]', "a")]
    log.assert_rebuild_equal()


def test_a_document_put_again_after_its_delete_keeps_its_new_value(log: EventLog) -> None:
    log.send(put("a", {"v": "old"}, minute=1), named(EventType.DOCUMENT_DELETED, "a", minute=2),
             put("a", {"v": "new"}, minute=3))
    assert [r[0] for r in log.rows("SELECT payload FROM events WHERE type = 'document.put' "
                                   "ORDER BY seq")] == ["{}", '{"namespace":["notes"],'
                                                        '"key":"a","value":{"v":"new"}}']
    found = get_document(log.reader(), ("notes",), "a", user_id=None, now=at(4))
    assert found is not None
    assert (found.value, found.created_at) == ({"v": "new"}, at(3))
    log.assert_rebuild_equal()


def test_an_expired_documents_values_leave_the_log_at_the_next_document_event(
    log: EventLog,
) -> None:
    log.send(put("short", {"v": "gone-9f2a"}, minute=0, ttl=5), put("kept", {}, minute=0))
    log.send(put("other", {}, minute=6, user="bob"))  # any document event applies expiry
    assert stored(log) == [(None, '["notes"]', "kept"), ("bob", '["notes"]', "other")]
    assert "gone-9f2a" not in "".join(r[0] for r in log.rows("SELECT payload FROM events"))
    (by,) = log.rows("SELECT seq FROM events WHERE json_extract(payload, '$.user_id') = 'bob'")
    assert log.rows("SELECT erased_by FROM events WHERE payload = '{}'") == [by]
    log.assert_rebuild_equal()


# Any label the schema takes: quotes, backslashes, other scripts (a namespace is matched
# as JSON text in the log).
LABELS = st.text(st.characters(codec="utf-8"), min_size=1, max_size=6).filter(
    lambda label: rules.namespace([label]) is None)
DOCUMENT_STEPS = st.lists(st.tuples(
    st.sampled_from(["put", "put", "delete", "touch"]),
    st.sampled_from([None, "alice", "bob"]),
    st.lists(LABELS, min_size=1, max_size=2).map(tuple),
    st.sampled_from(["k", "K", "k2"]),
    st.sampled_from([None, 1.0, 30.0]),
), min_size=1, max_size=25)


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow,
                                                                 HealthCheck.function_scoped_fixture])
@given(DOCUMENT_STEPS)
def test_the_log_holds_values_only_of_documents_that_exist(
    tmp_path_factory: pytest.TempPathFactory, steps: list[tuple[Any, ...]],
) -> None:
    log = EventLog(tmp_path_factory.mktemp("documents"))
    try:
        for minute, (step, user, namespace, key, ttl) in enumerate(steps):
            if step == "put":
                sent = put(key, {"m": minute}, minute=minute, ttl=ttl, namespace=namespace,
                           user=user)
            else:
                etype = (EventType.DOCUMENT_DELETED if step == "delete"
                         else EventType.DOCUMENT_TOUCHED)
                payload: dict[str, Any] = {"namespace": list(namespace), "key": key}
                sent = event(etype, payload | ({} if user is None else {"user_id": user}),
                             created_at=at(minute))
            log.send(sent)
        assert log.rejections() == []
        # Every document in the table has its last put's value, and the log no other
        # document's: what was deleted or has expired by the last event is gone.
        assert live_puts(log) == stored(log)
        log.assert_rebuild_equal()
    finally:
        log.close()


def test_the_upgrade_empties_the_events_of_documents_deleted_before_it(tmp_path: Path) -> None:
    conn = open_connection(tmp_path / "memq.db")
    schema.migrate(conn, through="0022_message_forgetting")
    logged = [put("a", {"v": "old"}), named(EventType.DOCUMENT_TOUCHED, "a"),
              put("a", {"v": "alice's"}, user="alice"),
              named(EventType.DOCUMENT_DELETED, "a"), put("a", {"v": "new"}),
              named(EventType.DOCUMENT_DELETED, "a", user="bob")]
    for seq, sent in enumerate(logged, start=1):
        conn.execute("INSERT INTO events (seq, event_id, type, version, session_id, created_at,"
                     " recorded_at, payload) VALUES (?, ?, ?, 1, NULL, ?, ?, ?)",
                     (seq, sent.id, sent.type, sent.created_at, sent.created_at,
                      orjson.dumps(sent.payload).decode()))
    assert schema.migrate(conn, through="0023_document_erasure") == ["0023_document_erasure"]
    rows = conn.execute("SELECT seq, payload = '{}', erased_by FROM events ORDER BY seq")
    assert list(rows) == [(1, 1, 4), (2, 1, 4), (3, 0, None), (4, 0, None), (5, 0, None),
                          (6, 0, None)]
    conn.close()


@pytest.mark.parametrize(("sql", "params"), [
    (documents._TOMBSTONE_EVENTS, {"by": 9, "user": None, "namespace": '["n"]', "key": "k"}),
    (documents._TOMBSTONE_EVENTS, {"by": 9, "user": "u", "namespace": '["n"]', "key": "k"}),
    (forgetting._TOMBSTONE_DOCUMENTS, {"by": 9, "user": "u"}),
])
def test_a_documents_events_are_found_by_seeking_their_index(
    log: EventLog, sql: str, params: dict[str, Any]
) -> None:
    plan = " ".join(str(row[-1]) for row in log.conn.execute(f"EXPLAIN QUERY PLAN {sql}", params))
    assert "SEARCH events USING INDEX events_document_key" in plan
