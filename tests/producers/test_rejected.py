"""Dropping rejected events: the person's call (every client), an event in the log, and a
clear refusal for anything else."""

from __future__ import annotations

from collections.abc import Iterator

import apsw
import pytest
import redis
from hypothesis import given, settings
from hypothesis import strategies as st

from memq import MemoryClient, names
from memq.authority import Role
from memq.config import Config
from memq.errors import NotFound, PermissionDenied, ValidationError
from memq.testing import WriterThread
from tests.producers.serving import client_of

pytestmark = pytest.mark.redis


@pytest.fixture
def admin(request: pytest.FixtureRequest, client_kind: str, writer: WriterThread
          ) -> Iterator[MemoryClient]:
    with client_of(request, client_kind, Role.ADMIN) as client:
        yield client


def set_aside(config: Config, admin: MemoryClient, count: int) -> list[int]:
    """``count`` entries the writer rejects; their ids in ``rejected_events``."""
    connection = redis.Redis.from_url(config.redis_url)
    for i in range(count):
        connection.xadd(names.ADMIN_INBOX_STREAM, {names.EVENT_FIELD: f"not an event {i}"})
    admin.append("s", "user", "behind them")
    admin.flush()
    return [row[0] for row in rows(config, "SELECT id FROM rejected_events ORDER BY id")]


def rows(config: Config, sql: str) -> list[tuple[object, ...]]:
    conn = apsw.Connection(config.db_path, flags=apsw.SQLITE_OPEN_READONLY)
    try:
        return conn.execute(sql).fetchall()
    finally:
        conn.close()


@pytest.mark.remote_too
def test_the_person_drops_rejected_events(config: Config, admin: MemoryClient) -> None:
    first, second, third = set_aside(config, admin, 3)
    event_id = admin.drop_rejected([first, third])
    admin.flush()
    assert rows(config, "SELECT id FROM rejected_events") == [(second,)]
    assert rows(config, f"SELECT type FROM events WHERE event_id = '{event_id}'") == [
        ("rejected.dropped",)]


@pytest.mark.remote_too
def test_a_missing_or_malformed_id_is_refused_before_anything_is_sent(
        config: Config, admin: MemoryClient) -> None:
    (only,) = set_aside(config, admin, 1)
    with pytest.raises(NotFound, match="no rejected event with id 99"):
        admin.drop_rejected([only, 99])
    for bad in ([], [only, only], ["1"], [True], [-1], 7):
        with pytest.raises(ValidationError, match="rejected_ids"):
            admin.drop_rejected(bad)  # type: ignore[arg-type]
    admin.flush()
    assert rows(config, "SELECT id FROM rejected_events") == [(only,)]


def test_an_agent_may_not_drop(config: Config, admin: MemoryClient,
                               request: pytest.FixtureRequest, client_kind: str) -> None:
    (only,) = set_aside(config, admin, 1)
    with client_of(request, client_kind, Role.AGENT) as agent, \
            pytest.raises(PermissionDenied, match="the person's"):
        agent.drop_rejected([only])


@settings(max_examples=50, deadline=None)
@given(st.lists(st.integers() | st.text(max_size=3) | st.booleans() | st.none(), max_size=4))
def test_any_list_is_judged_by_the_schema(ids: list[object]) -> None:
    from memq.events.rules import rejected_ids

    fine = (bool(ids) and len(set(map(repr, ids))) == len(ids)
            and all(type(i) is int and 0 < i < 2**63 for i in ids))  # type: ignore[operator]
    assert (rejected_ids(ids) is None) == fine
