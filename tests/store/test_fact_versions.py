"""A fact's values over time: a new value ends the old one's validity, ``as_of`` answers
what was true then, the history shows both clocks, and forgetting a user takes them all."""

from __future__ import annotations

from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from memq.events import Event, EventType
from memq.store import schema
from memq.store.read.facts import fact_history, list_facts
from tests.store.eventlog import EventLog, at, event


def set_fact(value: str, minute: int, *, valid: int | None = None, source: str = "agent",
             user: str | None = "alice"):
    payload: dict[str, object] = {"category": "home", "key": "city", "value": value,
                                  "source": source}
    if user is not None:
        payload["user_id"] = user
    if valid is not None:
        payload["valid_from"] = at(valid)
    return event(EventType.FACT_SET, payload, created_at=at(minute))


def delete_fact(minute: int, *, valid: int | None = None, user: str | None = "alice"):
    payload: dict[str, object] = {"category": "home", "key": "city", "source": "agent"}
    if user is not None:
        payload["user_id"] = user
    if valid is not None:
        payload["valid_to"] = at(valid)
    return event(EventType.FACT_DELETED, payload, created_at=at(minute))


def values_as_of(log: EventLog, minute: int, user: str | None = "alice") -> list[str]:
    return [f.value for f in list_facts(log.reader(), user_id=user, as_of=at(minute))]


def test_a_new_value_ends_the_old_ones_validity_instead_of_erasing_it(log: EventLog) -> None:
    log.send(set_fact("Lisbon", 1))
    log.send(set_fact("Porto", 10, valid=8))  # learned at 10 that it changed at 8
    assert values_as_of(log, 0) == []
    assert values_as_of(log, 5) == ["Lisbon"]
    assert values_as_of(log, 8) == ["Porto"]
    assert values_as_of(log, 30) == ["Porto"]
    [now] = list_facts(log.reader(), user_id="alice")
    assert (now.value, now.valid_from, now.valid_to) == ("Porto", at(8), None)
    history = fact_history(log.reader(), "home", "city", "alice")
    assert [(c.value, c.valid_from, c.valid_to, c.created_at) for c in history] == [
        ("Lisbon", at(1), at(8), at(1)), ("Porto", at(8), None, at(10))]
    log.assert_rebuild_equal()


def test_a_deletion_ends_the_value_and_a_refused_change_changes_no_version(
        log: EventLog) -> None:
    log.send(set_fact("Lisbon", 1, source="user"))
    log.send(set_fact("Madrid", 2))  # an agent's change of the user's value: refused
    assert values_as_of(log, 3) == ["Lisbon"]
    log.send(event(EventType.FACT_DELETED, {"category": "home", "key": "city",
                                            "user_id": "alice", "valid_to": at(20)},
                   created_at=at(25)))  # the person's deletion, unconditional
    assert values_as_of(log, 19) == ["Lisbon"]
    assert values_as_of(log, 20) == []
    assert list_facts(log.reader(), user_id="alice") == []
    history = fact_history(log.reader(), "home", "city", "alice")
    assert [(c.action, c.applied, c.valid_to) for c in history] == [
        ("set", True, at(20)), ("set", False, None), ("deleted", True, at(20))]
    log.assert_rebuild_equal()


def test_a_value_backdated_before_the_open_one_ends_that_one_where_it_began(
        log: EventLog) -> None:
    log.send(set_fact("Lisbon", 10))
    log.send(set_fact("Porto", 12, valid=5))
    assert values_as_of(log, 7) == ["Porto"]
    assert values_as_of(log, 11) == ["Porto"]  # the later word on the same time wins
    rows = log.rows("SELECT value, valid_from, valid_to FROM fact_versions ORDER BY seq")
    assert rows == [("Lisbon", at(10), at(10)), ("Porto", at(5), None)]


def test_global_and_users_values_over_time_and_other_users_never(log: EventLog) -> None:
    log.send(set_fact("everyone's", 1, user=None), set_fact("bob's", 1, user="bob"),
             set_fact("alice's", 2))
    assert values_as_of(log, 3) == ["everyone's", "alice's"]
    assert values_as_of(log, 3, user=None) == ["everyone's"]
    assert values_as_of(log, 3, user="bob") == ["everyone's", "bob's"]


def test_forgetting_a_user_takes_every_version(log: EventLog) -> None:
    log.send(set_fact("Lisbon", 1), set_fact("Porto", 2), set_fact("kept", 2, user="bob"))
    log.send(event(EventType.USER_FORGOTTEN, {"user_id": "alice"}, created_at=at(5)))
    assert log.rows("SELECT user_id, value FROM fact_versions") == [("bob", "kept")]
    assert values_as_of(log, 1) == []
    log.assert_rebuild_equal()


CHANGES = st.lists(st.tuples(st.sampled_from(["set", "delete"]), st.integers(0, 30),
                             st.booleans()), min_size=1, max_size=8)


@settings(max_examples=60, deadline=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(changes=CHANGES)
def test_as_of_answers_what_a_plain_model_of_the_timeline_says(
        tmp_path_factory: pytest.TempPathFactory, changes: list[tuple[str, int, bool]]
) -> None:
    """Changes learned in order (minute 40 + i), each about a time in the world (given, or
    when it was learned); at every minute, the value is the last change's at or before it
    among those learned, and what it replaced ends there."""
    log = EventLog(tmp_path_factory.mktemp("versions"))
    try:
        model: list[tuple[int, int, str | None]] = []  # (world time, order, value)
        for i, (kind, world, given) in enumerate(changes):
            when = world if given else 40 + i
            value = f"v{i}" if kind == "set" else None
            log.send(set_fact(value, 40 + i, valid=when) if value else
                     delete_fact(40 + i, valid=when))
            model.append((max(when, _open_start(model)) if value is None else when, i, value))
        for minute in range(0, 50, 3):
            assert values_as_of(log, minute) == _expected(model, minute), (changes, minute)
        log.assert_rebuild_equal()
    finally:
        log.close()


def _open_start(model: list[tuple[int, int, str | None]]) -> int:
    """Where the open value began (a deletion cannot end it before that)."""
    start = 0
    for world, _, value in model:
        start = world if value is not None else 0
    return start


def _expected(model: list[tuple[int, int, str | None]], minute: int) -> list[str]:
    # Each value lives from its start to the start of the next change in learning order
    # (never before its own start); at `minute`, the last-learned value whose span holds it.
    spans = []
    for k, (start, _, value) in enumerate(model):
        if value is None:
            continue
        later = model[k + 1:k + 2]
        end = max(start, later[0][0]) if later else None
        spans.append((start, end, value))
    live = [v for s, e, v in spans if s <= minute and (e is None or e > minute)]
    return live[-1:]


# -- generated, and what a review found: a forget erases only what came before it ----

USERS = [None, "alice", "bob"]
OP = st.tuples(
    st.sampled_from(["set", "set", "delete", "forget", "import"]),
    st.sampled_from(USERS), st.sampled_from(["agent", "user", None]), st.booleans(),
    st.one_of(st.none(), st.integers(0, 60)), st.sampled_from(["city", "diet"]))


Op = tuple[str, str | None, str | None, bool, int | None, str]
"""(kind, user, source, force, minute in the world, key)."""


def make(i: int, op: Op) -> Event:
    kind, user, source, force, world, key = op
    created = at(100 + i)
    if kind == "forget":
        return event(EventType.USER_FORGOTTEN, {"user_id": user or "alice"}, created_at=created)
    if kind == "import":
        return event(EventType.FACT_IMPORTED, {
            "fact_id": 10_000 + i, "category": "home", "key": f"legacy{i}", "value": f"l{i}",
            "source": source or "agent", "created_at": at(i), "updated_at": at(world or i)},
            created_at=created)
    p: dict[str, object] = {"category": "home", "key": key}
    if user is not None:
        p["user_id"] = user
    if force:
        p["force"] = True
    if kind == "set":
        p.update(value=f"v{i}", source=source or "agent")
        if world is not None:
            p["valid_from"] = at(world)
        return event(EventType.FACT_SET, p, created_at=created)
    if source is not None:
        p["source"] = source
    if world is not None:
        p["valid_to"] = at(world)
    return event(EventType.FACT_DELETED, p, created_at=created)


@settings(max_examples=30, deadline=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(ops=st.lists(OP, min_size=1, max_size=12), one_batch=st.booleans())
def test_random_fact_sequences_rebuild_equal_and_stay_consistent(
        tmp_path_factory: pytest.TempPathFactory, ops: list[Op], one_batch: bool) -> None:
    log = EventLog(tmp_path_factory.mktemp("rand"))
    try:
        events = [make(i, op) for i, op in enumerate(ops)]
        if one_batch:
            log.send(*events)
        else:
            for e in events:
                log.send(e)
        log.assert_rebuild_equal()
        reader = log.reader()
        forgotten = {e.payload["user_id"] for e in events if e.type == EventType.USER_FORGOTTEN}
        last_forget = {u: max(i for i, e in enumerate(events)
                              if e.type == EventType.USER_FORGOTTEN and e.payload["user_id"] == u)
                       for u in forgotten}
        for user in USERS:
            current = {(f.user_id, f.key): f.value for f in list_facts(reader, user_id=user)}
            # The current value is the open version's, and the history's last applied one.
            for minute in range(0, 200, 7):
                for f in list_facts(reader, user_id=user, as_of=at(minute)):
                    assert f.user_id in (None, user), (ops, f)
                    if f.user_id in last_forget:  # nothing from before the forget survives
                        seq_of_forget = log.rows(
                            "SELECT max(seq) FROM events WHERE type='user.forgotten' "
                            "AND json_extract(payload,'$.user_id')=?", f.user_id)[0][0]
                        assert f.id > seq_of_forget, (ops, f)
            open_versions = {(u, k): v for u, k, v in log.rows(
                "SELECT user_id, key, value FROM fact_versions WHERE valid_to IS NULL "
                "AND ifnull(user_id,'') IN ('', ifnull(?, ''))", user)}
            assert open_versions == current, ops
            for key in ("city", "diet"):
                hist = fact_history(reader, "home", key, user)
                applied = [c for c in hist if c.applied]
                open_hist = [c for c in applied if c.valid_to is None and c.action != "deleted"]
                assert [c.value for c in open_hist] == (
                    [current[(user, key)]] if (user, key) in current else []), (ops, hist)
        reader.close()
    finally:
        log.close()


def test_migration_0028_on_a_database_from_before(tmp_path: Path) -> None:
    log = EventLog(tmp_path)
    log.send(event(EventType.FACT_SET, {"category": "home", "key": "city", "value": "Lisbon",
                                        "source": "user", "user_id": "alice"},
                   created_at=at(1)),
             event(EventType.FACT_SET, {"category": "home", "key": "city", "value": "Porto",
                                        "source": "agent", "user_id": "alice",
                                        "valid_from": at(0)}, created_at=at(2)),
             event(EventType.FACT_SET, {"category": "home", "key": "city", "value": "Faro",
                                        "source": "agent", "force": True,
                                        "valid_from": "2026-03-01T11:00:00+02:00"},
                   created_at=at(3)),
             event(EventType.FACT_DELETED, {"category": "home", "key": "city",
                                            "valid_to": at(30)}, created_at=at(4)))
    before = log.rows("SELECT * FROM fact_versions ORDER BY seq")
    log.conn.execute("DROP TABLE fact_versions; DELETE FROM schema_migrations "
                     "WHERE name = '0028_fact_versions'")
    schema.migrate(log.conn)
    assert log.rows("SELECT * FROM fact_versions ORDER BY seq") == before
    log.assert_rebuild_equal()
    log.close()


def _forget_then_set(log: EventLog, *, one_batch: bool) -> None:
    forget = event(EventType.USER_FORGOTTEN, {"user_id": "alice"}, created_at=at(1))
    later = event(EventType.FACT_SET, {"category": "home", "key": "city", "value": "Porto",
                                       "source": "agent", "user_id": "alice"},
                  created_at=at(2))
    if one_batch:
        log.send(forget, later)
    else:
        log.send(forget)
        log.send(later)


@pytest.mark.parametrize("one_batch", [True, False])
def test_a_fact_set_after_a_forget_survives_the_log_and_a_rebuild(
        tmp_path: Path, one_batch: bool) -> None:
    log = EventLog(tmp_path)
    _forget_then_set(log, one_batch=one_batch)
    assert [f.value for f in list_facts(log.reader(), user_id="alice")] == ["Porto"]
    log.assert_rebuild_equal()  # check, then `memq rebuild` (in place)
    assert log.rows("SELECT type, erased_by FROM events ORDER BY seq") == [
        ("user.forgotten", None), ("fact.set", None)]
    assert [f.value for f in list_facts(log.reader(), user_id="alice")] == ["Porto"]
    log.close()
