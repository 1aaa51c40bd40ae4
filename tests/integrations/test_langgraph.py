"""MemqStore against LangGraph's BaseStore, as LangGraph's own store tests
(libs/checkpoint/tests/test_store.py) expect a store to behave, on a real writer and Redis
and with memq's real embedding model for searches by meaning."""

from __future__ import annotations

import asyncio
import time
from pathlib import Path

import apsw
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from langgraph.store.base import InvalidNamespaceError, PutOp

from memq import MemoryClient, RemoteMemoryClient
from memq.authority import Role
from memq.config import Config
from memq.errors import NotFound, PermissionDenied
from memq.integrations.langgraph import MemqStore
from memq.store import rebuild
from tests.producers.serving import serving

pytestmark = pytest.mark.redis


@pytest.fixture
def store(client: MemoryClient) -> MemqStore:
    return MemqStore(client=client, index_fields=[])  # no search by meaning: no model


NAMESPACES = [("a", "b", "c"), ("a", "b", "d", "e"), ("a", "b", "d", "i"), ("a", "b", "f"),
              ("a", "c", "f"), ("b", "a", "f"), ("users", "123"), ("users", "456", "settings"),
              ("admin", "users", "789")]


def test_list_namespaces_as_langgraph_expects(store: MemqStore) -> None:
    assert store.list_namespaces() == []
    store.batch([PutOp(ns, f"id_{i}", {"data": f"value_{i:02d}"})
                 for i, ns in enumerate(NAMESPACES)])
    assert sorted(store.list_namespaces()) == sorted(NAMESPACES)
    assert sorted(store.list_namespaces(prefix=("a", "b"))) == NAMESPACES[:4]
    assert sorted(store.list_namespaces(suffix=("f",))) == [("a", "b", "f"), ("a", "c", "f"),
                                                             ("b", "a", "f")]
    assert sorted(store.list_namespaces(prefix=("a",), suffix=("f",))) == [("a", "b", "f"),
                                                                            ("a", "c", "f")]
    assert store.list_namespaces(prefix=("a", "b"), max_depth=3) == [
        ("a", "b", "c"), ("a", "b", "d"), ("a", "b", "f")]
    assert store.list_namespaces(max_depth=2) == [("a", "b"), ("a", "c"), ("admin", "users"),
                                                  ("b", "a"), ("users", "123"),
                                                  ("users", "456")]
    assert store.list_namespaces(prefix=("a", "b"), limit=2) == NAMESPACES[:2]
    assert store.list_namespaces(prefix=("a", "b"), offset=2) == NAMESPACES[2:4]
    assert sorted(store.list_namespaces(prefix=("a", "*", "f"))) == [("a", "b", "f"),
                                                                      ("a", "c", "f")]
    assert sorted(store.list_namespaces(suffix=("*", "f"))) == [("a", "b", "f"),
                                                                 ("a", "c", "f"), ("b", "a", "f")]
    assert store.list_namespaces(prefix=("*", "users"), suffix=("*", "settings")) == []
    assert store.list_namespaces(prefix=("nonexistent",)) == []
    assert store.list_namespaces(prefix=("users", "123")) == [("users", "123")]


def test_put_get_update_delete(store: MemqStore) -> None:
    assert store.get(("notes",), "k") is None
    store.put(("notes",), "k", {"text": "Lisbon on March 5th", "n": 1})
    first = store.get(("notes",), "k")
    assert first is not None
    assert (first.namespace, first.key, first.value) == (("notes",), "k",
                                                         {"text": "Lisbon on March 5th", "n": 1})
    store.put(("notes",), "k", {"text": "Porto instead"})
    second = store.get(("notes",), "k")
    assert second is not None
    assert second.value == {"text": "Porto instead"}
    assert (second.created_at, second.updated_at > first.updated_at) == (first.created_at, True)
    store.delete(("notes",), "k")
    assert store.get(("notes",), "k") is None


def test_namespaces_langgraph_refuses(store: MemqStore) -> None:
    for bad in [(), ("the", "thing.about"), ("some", "fun", ""), ("langgraph", "foo")]:
        with pytest.raises(InvalidNamespaceError):
            store.put(bad, "foo", {"foo": "bar"})
    store.batch([PutOp(("langgraph", "foo"), "bar", {"foo": "bar"})])  # past the public put
    item = store.get(("langgraph", "foo"), "bar")
    assert item is not None
    assert item.value == {"foo": "bar"}


def test_a_batch_reads_first_and_writes_last(store: MemqStore) -> None:
    from langgraph.store.base import GetOp

    results = store.batch([PutOp(("n",), "k", {"v": 1}), GetOp(("n",), "k"),
                           PutOp(("n",), "k", {"v": 2})])
    assert results == [None, None, None]  # as LangGraph's in-memory store answers
    item = store.get(("n",), "k")
    assert item is not None
    assert item.value == {"v": 2}  # the last put of a key wins


def test_search_with_filters_and_pages(store: MemqStore) -> None:
    docs = [("d1", {"color": "red", "score": 4.5, "meta": {"kind": "a"}}),
            ("d2", {"color": "blue", "score": 3.0, "meta": {"kind": "b"}}),
            ("d3", {"color": "red", "score": 2.0, "meta": {"kind": "a"}}),
            ("d4", {"color": "green", "score": 4.0})]
    store.batch([PutOp(("test",), key, value) for key, value in docs])
    store.put(("other",), "d5", {"color": "red"})

    def keys(**kw: object) -> list[str]:
        return sorted(i.key for i in store.search(("test",), **kw))  # type: ignore[arg-type]

    assert keys() == ["d1", "d2", "d3", "d4"]
    assert keys(filter={"color": "red"}) == ["d1", "d3"]
    assert keys(filter={"score": {"$gte": 4.0}}) == ["d1", "d4"]
    assert keys(filter={"score": {"$gt": 2.0, "$lt": 4.5}}) == ["d2", "d4"]
    assert keys(filter={"color": {"$ne": "red"}}) == ["d2", "d4"]
    assert keys(filter={"meta": {"kind": "a"}}) == ["d1", "d3"]
    assert keys(filter={"color": "red", "score": {"$lt": 3}}) == ["d3"]
    assert len(store.search((), limit=10)) == 5
    page = [i.key for i in store.search(("test",), limit=2)]
    rest = [i.key for i in store.search(("test",), limit=2, offset=2)]
    assert sorted(page + rest) == ["d1", "d2", "d3", "d4"]


@pytest.mark.model
def test_search_by_meaning_ranks_the_closest_first(client: MemoryClient) -> None:
    store = MemqStore(client=client)
    store.batch([
        PutOp(("memories",), "1", {"text": "The user is allergic to peanuts."}),
        PutOp(("memories",), "2", {"text": "The user's dog is called Biscuit."}),
        PutOp(("memories",), "3", {"text": "Flights: always a window seat."}),
        PutOp(("memories",), "4", {"text": "no vector for this one"}, index=False),
        PutOp(("memories",), "5", {"title": "x", "body": "Prefers green tea to coffee."},
              index=["body"]),
    ])
    hits = store.search(("memories",), query="what food allergy does she have?")
    assert [h.key for h in hits][:1] == ["1"]
    assert hits[-1].key == "4"
    assert hits[-1].score is None  # put without a vector: after those with one
    assert all(h.score is not None for h in hits[:-1])
    drink = store.search(("memories",), query="hot drinks she likes", limit=1)
    assert [h.key for h in drink] == ["5"]
    assert store.search(("memories",), query="pets", filter={"text": {"$ne": "x"}},
                        limit=1)[0].key == "2"
    # An empty query is none, as LangGraph's own stores read it: newest first, no scores.
    assert [h.score for h in store.search(("memories",), query="")] == [None] * 5


def test_ttl_expires_an_item_and_a_rebuild_agrees(store: MemqStore, config: Config) -> None:
    store.put(("t",), "short", {"v": 1}, ttl=0.001)  # 60 ms
    store.put(("t",), "long", {"v": 2}, ttl=60)
    store.put(("t",), "forever", {"v": 3})
    time.sleep(0.2)
    assert store.get(("t",), "short") is None  # expired for readers at once
    assert sorted(i.key for i in store.search(("t",))) == ["forever", "long"]
    store.put(("t",), "later", {"v": 4})  # the writer deletes what had expired by then
    with apsw.Connection(config.db_path, flags=apsw.SQLITE_OPEN_READONLY) as conn:
        rows = [r[0] for r in conn.execute("SELECT key FROM documents ORDER BY key")]
    assert rows == ["forever", "later", "long"]
    assert rebuild.check(config.db_path) == []


def test_a_deleted_or_expired_item_leaves_no_value_in_the_log(
        store: MemqStore, config: Config) -> None:
    store.put(("t",), "deleted", {"v": "qzvdeleted1"})
    store.put(("t",), "deleted", {"v": "qzvdeleted2"})
    store.put(("t",), "expired", {"v": "qzvexpired"}, ttl=0.001)
    store.put(("t",), "kept", {"v": "qzvkept"})
    store.delete(("t",), "deleted")
    time.sleep(0.1)
    store.put(("t",), "later", {"v": 4})
    with apsw.Connection(config.db_path, flags=apsw.SQLITE_OPEN_READONLY) as conn:
        log = "".join(r[0] for r in conn.execute("SELECT payload FROM events"))
    assert [w for w in ("qzvdeleted1", "qzvdeleted2", "qzvexpired", "qzvkept") if w in log] == [
        "qzvkept"]
    assert rebuild.check(config.db_path) == []


def test_a_read_restarts_the_time_to_live(store: MemqStore, client: MemoryClient) -> None:
    store.put(("t",), "k", {"v": 1}, ttl=60)
    before = client.document(("t",), "k")
    store.get(("t",), "k")  # refresh_on_read is on by default
    client.flush()
    after = client.document(("t",), "k")
    assert before is not None
    assert after is not None
    assert after.expires_at is not None
    assert before.expires_at is not None
    assert after.expires_at > before.expires_at
    MemqStore(client=client, index_fields=[], ttl={"refresh_on_read": False}).get(("t",), "k")
    client.flush()
    assert client.document(("t",), "k") == after


def test_a_user_store_is_a_scope_and_forgetting_the_user_erases_it(
        client: MemoryClient, config: Config) -> None:
    alice = MemqStore(client=client, user_id="alice", index_fields=[])
    bob = MemqStore(client=client, user_id="bob", index_fields=[])
    shared = MemqStore(client=client, index_fields=[])
    alice.put(("memories",), "seat", {"text": "window"})
    bob.put(("memories",), "seat", {"text": "aisle"})
    assert [i.value for i in alice.search(("memories",))] == [{"text": "window"}]
    assert [i.value for i in bob.search(("memories",))] == [{"text": "aisle"}]
    assert shared.get(("memories",), "seat") is None
    client.wait_forgotten(client.forget_user("alice"))
    assert alice.get(("memories",), "seat") is None
    assert alice.list_namespaces() == []
    assert [i.value for i in bob.search(("memories",))] == [{"text": "aisle"}]
    with apsw.Connection(config.db_path, flags=apsw.SQLITE_OPEN_READONLY) as conn:
        kept = [r[0] for r in conn.execute(
            "SELECT payload FROM events WHERE type = 'document.put'")]
    assert sorted("aisle" in payload for payload in kept) == [False, True]  # bob's is kept
    assert "{}" in kept  # alice's is a tombstone
    assert not any("window" in payload for payload in kept)
    assert rebuild.check(config.db_path) == []


def test_the_async_methods(store: MemqStore) -> None:
    async def run() -> tuple[object, object, object]:
        await store.aput(("a",), "k", {"v": 1})
        got = await store.aget(("a",), "k")
        found = await store.asearch(("a",))
        await store.adelete(("a",), "k")
        return got, [i.key for i in found], await store.aget(("a",), "k")

    got, found, gone = asyncio.run(run())
    assert getattr(got, "value", None) == {"v": 1}
    assert (found, gone) == (["k"], None)


def test_non_ascii(store: MemqStore) -> None:
    store.put(("user_123", "memories"), "1", {"text": "这是中文"})
    store.put(("user_123", "memories"), "2", {"text": "これは日本語です"})
    assert sorted(i.value["text"] for i in store.search(("user_123",))) == sorted(
        ["这是中文", "これは日本語です"])


def test_without_a_client_it_uses_the_environments(config: Config, writer: object,
                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("MEMQ_REDIS_URL", config.redis_url)
    monkeypatch.setenv("MEMQ_DB", config.db_path)
    store = MemqStore(index_fields=[])
    store.put(("n",), "k", {"v": 1})
    assert store.get(("n",), "k") is not None


@settings(max_examples=30, deadline=None, derandomize=True,
          suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(st.lists(st.text(max_size=10), min_size=1, max_size=3), st.text(max_size=10),
       st.dictionaries(st.text(max_size=5), st.integers() | st.text(max_size=5), max_size=3))
def test_any_put_is_kept_as_given_or_refused_with_a_reason(
        store: MemqStore, namespace: list[str], key: str, value: dict[str, object]) -> None:
    from memq import ValidationError

    try:
        store.put(tuple(namespace), key, value)
    except (InvalidNamespaceError, ValidationError) as exc:
        refused: str | None = str(exc)
    else:
        refused = None
    if refused is not None:
        assert refused  # a reason, never an empty message
        return
    item = store.get(tuple(namespace), key)
    assert item is not None
    assert (item.namespace, item.key, item.value) == (tuple(namespace), key, value)


def test_with_a_key_the_store_reaches_only_its_users_documents(
    config: Config, role_urls: dict[Role, str], writer: object, tmp_path: Path
) -> None:
    with serving(config, role_urls, tmp_path) as served, \
            RemoteMemoryClient(served.url, token=served.token(Role.ADMIN)) as person:
        MemqStore(client=person, user_id="bob", index_fields=[]).put(
            ("notes",), "plan", {"text": "bob's plan"})
        key = person.create_key("graph", users=["alice"])
        person.flush()
        with RemoteMemoryClient(served.url, token=key.secret) as remote:
            alice = MemqStore(client=remote, user_id="alice", index_fields=[])
            alice.put(("notes",), "seat", {"text": "window"})
            remote.flush()
            assert [i.key for i in alice.search(("notes",))] == ["seat"]
            assert alice.list_namespaces() == [("notes",)]
            with pytest.raises(NotFound):
                MemqStore(client=remote, user_id="bob", index_fields=[]).get(("notes",), "plan")
            with pytest.raises(PermissionDenied, match="name the user_id"):
                MemqStore(client=remote, index_fields=[]).put(("notes",), "x", {"a": 1})
        assert MemqStore(client=person, user_id="bob").get(("notes",), "plan") is not None


def test_with_a_tenants_key_the_stores_namespaces_are_the_tenants_own(
    config: Config, role_urls: dict[Role, str], writer: object, tmp_path: Path
) -> None:
    """Two tenants' graphs use the same user and namespace and never see each other's."""
    with serving(config, role_urls, tmp_path) as served, \
            RemoteMemoryClient(served.url, token=served.token(Role.ADMIN)) as person:
        keys = {t: person.create_key(t, tenant=t, users=["alice"]) for t in ("acme", "globex")}
        person.flush()
        for tenant, key in keys.items():
            with RemoteMemoryClient(served.url, token=key.secret) as remote:
                store = MemqStore(client=remote, user_id="alice", index_fields=[])
                store.put(("notes",), "seat", {"text": f"{tenant}'s window"})
                remote.flush()
        for tenant, key in keys.items():
            with RemoteMemoryClient(served.url, token=key.secret) as remote:
                store = MemqStore(client=remote, user_id="alice", index_fields=[])
                assert [i.value for i in store.search(("notes",))] == [
                    {"text": f"{tenant}'s window"}]
                assert store.list_namespaces() == [("notes",)]
        assert MemqStore(client=person, user_id="alice").get(("notes",), "seat") is None
