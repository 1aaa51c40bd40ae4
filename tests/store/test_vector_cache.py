"""The read side's vector cache, fed by real events through the inbox and a real writer."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import numpy as np
import orjson
import pytest

from memq import MemoryClient
from memq.clock import now_rfc3339, uuid7
from memq.config import DEFAULT_MODEL_NAME, Config
from memq.errors import EventsRejected
from memq.events import Event, EventType
from memq.store.read import neighbourhoods, vector_index
from memq.store.read.pool import ReadPool
from memq.store.read.scope import Scope
from memq.store.read.vector_cache import VectorCache
from tests.embedding_events import send_embeddings

pytestmark = pytest.mark.redis

DIM = 384


def unit_vectors(n: int, seed: int = 0) -> np.ndarray:
    rows = np.random.default_rng(seed).standard_normal((n, DIM))
    return (rows / np.linalg.norm(rows, axis=1, keepdims=True)).astype(np.float32)


@pytest.fixture
def cache(client: MemoryClient, config: Config) -> Iterator[VectorCache]:
    readers = ReadPool(config.db_path)
    yield VectorCache(readers, model_name=DEFAULT_MODEL_NAME, dim=DIM)
    readers.close()


def appended(client: MemoryClient, session: str, n: int) -> list[str]:
    ids = [client.append(session, "user", f"{session} turn {i}") for i in range(n)]
    client.flush()
    return ids


class RowCounter:
    """Counts the rows each refresh reads (a spy on the real method)."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch) -> None:
        self.reads: list[int] = []
        original = VectorCache._apply

        def spy(cache: VectorCache, index: Any, rows: list[Any]) -> None:
            self.reads.append(len(rows))
            original(cache, index, rows)

        monkeypatch.setattr(VectorCache, "_apply", spy)


def test_session_is_loaded_once_then_refreshed_incrementally(
    client: MemoryClient, cache: VectorCache, monkeypatch: pytest.MonkeyPatch
) -> None:
    counter = RowCounter(monkeypatch)
    ids = appended(client, "s1", 6)
    vectors = unit_vectors(6)
    send_embeddings(client, ids[:4], vectors[:4])
    assert [i for i, _ in cache.search(Scope("s1"), vectors[2], 0.99, 5)] == [ids[2]]
    cache.search(Scope("s1"), vectors[1], 0.99, 5)  # nothing changed: no rows read at all
    send_embeddings(client, ids[4:], vectors[4:])
    assert [i for i, _ in cache.search(Scope("s1"), vectors[5], 0.99, 5)] == [ids[5]]
    assert counter.reads == [4, 2]
    assert cache.vector_count(Scope("s1")) == 6


def test_a_settled_block_refreshes_each_scope_once(
    client: MemoryClient, cache: VectorCache, monkeypatch: pytest.MonkeyPatch
) -> None:
    looks: list[int] = []
    original = VectorCache._read_changes
    monkeypatch.setattr(VectorCache, "_read_changes",
                        lambda c, scope, entry: (looks.append(1), original(c, scope, entry)))
    ids = appended(client, "s1", 4)
    vectors = unit_vectors(4)
    send_embeddings(client, ids[:2], vectors[:2])
    with cache.settled():
        assert [i for i, _ in cache.search(Scope("s1"), vectors[0], 0.99, 5)] == [ids[0]]
        send_embeddings(client, ids[2:], vectors[2:])  # committed within: not seen
        assert cache.search(Scope("s1"), vectors[3], 0.99, 5) == []
        assert cache.scores(Scope("s1"), ids, vectors[1]).keys() == {ids[0], ids[1]}
        assert cache.moments(Scope("s1"), vectors[1]) is not None
    assert len(looks) == 1
    assert [i for i, _ in cache.search(Scope("s1"), vectors[3], 0.99, 5)] == [ids[3]]
    assert len(looks) == 2


def test_other_sessions_never_enter(client: MemoryClient, cache: VectorCache) -> None:
    mine, theirs = appended(client, "s1", 2), appended(client, "s2", 2)
    vectors = unit_vectors(4)
    send_embeddings(client, mine + theirs, vectors)
    found = cache.search(Scope("s1"), vectors[2], -1.0, 10)  # s2's own vector as the query
    assert sorted(i for i, _ in found) == sorted(mine)
    assert cache.vector_count(Scope("s1")) == 2
    cache.refresh(Scope("s2"))
    send_embeddings(client, appended(client, "s1", 1), unit_vectors(1, seed=9))
    cache.refresh(Scope("s2"))  # s1's new embedding is past s2's mark but not s2's
    assert cache.vector_count(Scope("s2")) == 2
    assert cache.vector_count() == 4


def test_only_the_configured_model_and_dimension_are_used(
    client: MemoryClient, cache: VectorCache
) -> None:
    ids = appended(client, "s1", 3)
    vectors = unit_vectors(3)
    send_embeddings(client, ids[:1], vectors[:1])
    send_embeddings(client, ids[1:2], vectors[1:2], model="another/model")
    small = unit_vectors(1)[:, :16] / np.linalg.norm(unit_vectors(1)[:, :16])
    # The right name with 16 dims: the writer knows the model's size and refuses it.
    with pytest.raises(EventsRejected, match="vector has 16 dims, but"):
        send_embeddings(client, ids[2:], small.astype(np.float32))
    found = cache.search(Scope("s1"), vectors[1], -1.0, 10)
    assert [i for i, _ in found] == [ids[0]]


def test_re_embedding_replaces_the_cached_row(client: MemoryClient, cache: VectorCache) -> None:
    ids = appended(client, "s1", 2)
    first, second = unit_vectors(2)
    send_embeddings(client, ids[:1], first[None, :])
    assert cache.scores(Scope("s1"), ids, first) == {ids[0]: pytest.approx(1.0, abs=1e-3)}
    # Another model takes over: its vector is not comparable, so the message leaves.
    send_embeddings(client, ids[:1], second[None, :], model="another/model")
    assert cache.scores(Scope("s1"), ids, first) == {}
    # The configured model again, with a new vector: the new row replaces the old.
    send_embeddings(client, ids[:1], second[None, :])
    assert cache.scores(Scope("s1"), ids, second) == {ids[0]: pytest.approx(1.0, abs=1e-3)}
    assert cache.vector_count(Scope("s1")) == 1


def imported(session: str, message_id: str, embedding: list[float], model: str | None) -> Event:
    payload: dict[str, Any] = {
        "message_id": message_id, "role": "user", "content": "from the old layout",
        "importance": 0.5, "created_at": "2025-01-01T00:00:00.000000Z",
        "embedding_json": orjson.dumps(embedding).decode(), "embedding_model": model,
    }
    return Event(id=uuid7(), type=EventType.MESSAGE_IMPORTED, session_id=session,
                 created_at=now_rfc3339(), payload=payload)


def test_legacy_json_embeddings_are_read_and_normalised(
    client: MemoryClient, cache: VectorCache
) -> None:
    vector = unit_vectors(1)[0]
    client.outbox.send(imported("s1", "legacy-1", [float(x) * 3 for x in vector],
                                DEFAULT_MODEL_NAME))
    client.outbox.send(imported("s1", "legacy-2", [float(x) for x in vector], None))
    client.flush()
    found = cache.search(Scope("s1"), vector, 0.99, 5)
    assert [i for i, _ in found] == ["legacy-1"]  # the one without a model is not used
    assert found[0][1] == pytest.approx(1.0, abs=1e-3)


def test_sessions_beyond_the_vector_bound_are_dropped_least_recent_first(
    client: MemoryClient, config: Config
) -> None:
    readers = ReadPool(config.db_path)
    cache = VectorCache(readers, model_name=DEFAULT_MODEL_NAME, dim=DIM, max_vectors=5)
    for session in ("a", "b", "c"):
        send_embeddings(client, appended(client, session, 2), unit_vectors(2))
    cache.refresh(Scope("a"))
    cache.refresh(Scope("b"))
    assert Scope("a") in cache
    assert Scope("b") in cache
    cache.refresh(Scope("c"))  # 6 vectors > 5: a, the least recently used, goes
    assert Scope("a") not in cache
    assert Scope("b") in cache
    assert Scope("c") in cache
    cache.refresh(Scope("a"))  # comes back whole when used again
    assert cache.vector_count(Scope("a")) == 2
    assert Scope("b") not in cache
    readers.close()


def test_discard_and_forget(client: MemoryClient, cache: VectorCache) -> None:
    ids = appended(client, "s1", 2)
    vectors = unit_vectors(2)
    send_embeddings(client, ids, vectors)
    cache.refresh(Scope("s1"))
    cache.discard(Scope("s1"), ids[:1])
    assert set(cache.scores(Scope("s1"), ids, vectors[0])) == {ids[1]}
    cache.forget(Scope("s1"))
    assert Scope("s1") not in cache
    assert set(cache.scores(Scope("s1"), ids, vectors[0])) == set(ids)  # reloaded from the database


@pytest.mark.parametrize(("dim", "max_vectors"), [(0, 10), (384, 0)])
def test_bad_bounds_are_refused(config: Config, dim: int, max_vectors: int) -> None:
    with pytest.raises(ValueError, match="must be at least 1"):
        VectorCache(ReadPool(config.db_path), model_name="m", dim=dim, max_vectors=max_vectors)


def owned(client: MemoryClient, session: str, n: int, user: str, agent: str | None = None
          ) -> list[str]:
    ids = [client.append(session, "user", f"{session} turn {i}", user_id=user, agent_id=agent)
           for i in range(n)]
    client.flush()
    return ids


def test_a_users_scope_holds_every_session_of_that_user_only(
    client: MemoryClient, cache: VectorCache, monkeypatch: pytest.MonkeyPatch
) -> None:
    counter = RowCounter(monkeypatch)
    a = owned(client, "a", 2, "u1", "support")
    b = owned(client, "b", 2, "u1", "sales")
    theirs = owned(client, "c", 2, "u2", "support")
    vectors = unit_vectors(6)
    send_embeddings(client, a + b + theirs, vectors)
    user = Scope("a", "user", "u1")
    assert sorted(i for i, _ in cache.search(user, vectors[4], -1.0, 10)) == sorted(a + b)
    agent = Scope("a", "agent", "u1", "support")
    assert sorted(i for i, _ in cache.search(agent, vectors[2], -1.0, 10)) == sorted(a)
    assert cache.moments(Scope("c", "user", "u2"), vectors[0]) is not None
    more = owned(client, "d", 1, "u1")
    send_embeddings(client, more, unit_vectors(1, seed=3))
    assert set(cache.scores(Scope("b", "user", "u1"), more + theirs, vectors[0])) == set(more)
    assert counter.reads == [4, 2, 2, 1]  # each scope loaded once, then only what is new
    assert cache.vector_count(user) == 5


@pytest.mark.parametrize("scope", [Scope("s"), Scope("s", "user", "u"),
                                   Scope("s", "agent", "u", "a")])
def test_a_scope_is_loaded_through_its_own_index(config: Config, client: MemoryClient,
                                                 scope: Scope) -> None:
    from memq.store.read import vector_cache

    client.append("s", "user", "hello", user_id="u", agent_id="a")
    client.flush()
    sql = vector_cache._WHOLE_SCOPE.format(index=scope.index, scope=scope.condition())
    with client.readers.connection() as conn:
        plan = " ".join(str(r[-1]) for r in conn.execute(
            f"EXPLAIN QUERY PLAN {sql}", {**scope.params(), "high": 1}))
    assert f"USING INDEX {scope.index}" in plan


def test_a_large_scopes_keys_are_projected_and_still_scored_exactly(
        client: MemoryClient, config: Config, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(neighbourhoods, "PROJECT_FROM", 64)
    monkeypatch.setattr(neighbourhoods, "KEPT_DIMS", 48)
    readers = ReadPool(config.db_path)
    cache = VectorCache(readers, model_name=DEFAULT_MODEL_NAME, dim=DIM, context_weight=0.5)
    try:
        ids = appended(client, "s1", 100)
        vectors = unit_vectors(100, seed=2)
        send_embeddings(client, ids, vectors)
        scope = Scope("s1")
        query = vectors[10]
        found = cache.search(scope, query, -1.0, 5, keys=True)
        entry = cache._entries[scope.key]
        assert entry.keys is not None
        assert entry.keys.projected
        assert entry.keys.index.dim == 48
        exact = {i: float(entry.keys.key(i) @ query) for i in ids}
        assert dict(found) == pytest.approx({i: exact[i] for i, _ in found}, abs=1e-4)
        assert found[0][0] == ids[10]
        cache.discard(scope, [ids[10]])
        again = cache.search(scope, query, -1.0, 5, keys=True)
        assert ids[10] not in {i for i, _ in again}
        assert cache.scores(scope, [ids[10]], query, keys=True) == {}
    finally:
        readers.close()


def test_vectors_turned_keep_their_dot_products(
        client: MemoryClient, config: Config, monkeypatch: pytest.MonkeyPatch) -> None:
    """A fitted index keeps its rows rotated: read back as given, or as kept (cheaper), the
    vectors have the same dot products with each other (what near-copies are judged by)."""
    monkeypatch.setattr(vector_index, "FIT_MIN_ROWS", 32)
    readers = ReadPool(config.db_path)
    cache = VectorCache(readers, model_name=DEFAULT_MODEL_NAME, dim=DIM)
    try:
        ids = appended(client, "s1", 64)
        given = unit_vectors(64, seed=4)
        send_embeddings(client, ids, given)
        scope = Scope("s1")
        cache.refresh(scope)
        assert cache._entries[scope.key].index.basis is not None  # rotated
        asked = [ids[5], "unknown", ids[9], ids[5], ids[40]]
        plain, turned = cache.vectors(scope, asked), cache.vectors(scope, asked, turned=True)
        assert list(plain) == list(turned) == [ids[5], ids[9], ids[40]]
        assert plain[ids[9]] == pytest.approx(given[9], abs=0.01)
        gram = lambda vs: np.array([[a @ b for b in vs.values()] for a in vs.values()])  # noqa: E731
        assert gram(turned) == pytest.approx(gram(plain), abs=1e-5)
        assert not np.allclose(turned[ids[9]], plain[ids[9]], atol=0.01)
    finally:
        readers.close()
