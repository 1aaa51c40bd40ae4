"""Documents through the client: what it refuses before sending, and what it reads back."""

from __future__ import annotations

import itertools
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from memq import MemoryClient, ValidationError
from memq.producers.documents import matches

pytestmark = pytest.mark.redis

KEYS = itertools.count()
GENERATED = settings(max_examples=40, deadline=None, derandomize=True,
                     suppress_health_check=[HealthCheck.function_scoped_fixture])


@GENERATED
@given(st.lists(st.text(max_size=12), max_size=4), st.text(max_size=12))
def test_any_namespace_is_stored_as_given_or_refused_with_its_reason(
        client: MemoryClient, namespace: list[str], key: str) -> None:
    sent = client.outbox.redis.xlen("memq:inbox")
    try:
        client.put_document(namespace, key, {"v": 1})
        refused = None
    except ValidationError as exc:
        refused = str(exc)
    if refused is not None:
        assert refused.startswith(("namespace", "key"))
        assert client.outbox.redis.xlen("memq:inbox") == sent  # nothing was sent
        return
    client.flush()
    found = client.document(namespace, key)
    assert found is not None
    assert (found.namespace, found.key, found.value) == (tuple(namespace), key, {"v": 1})


@pytest.mark.parametrize(("call", "reason"), [
    (lambda c: c.put_document(("n",), "k", ["not", "a", "dict"]), "value must be a dict"),
    (lambda c: c.put_document(("n",), "k", {}, ttl_minutes="5"), "ttl_minutes"),
    (lambda c: c.put_document(("n",), "k", {}, ttl_minutes=-1), "ttl_minutes"),
    (lambda c: c.put_document("n", "k", {}), "namespace must be a tuple"),
    (lambda c: c.put_document(("a.b",), "k", {}), "label with a '.'"),
    (lambda c: c.put_document(("n",), "k", {}, user_id=" "), "user_id"),
    # JSON has no NaN: the encoder wrote null, and a reader returned what was not stored.
    (lambda c: c.put_document(("n",), "k", {"x": float("nan")}), "not finite"),
    (lambda c: c.put_document(("n",), "k", {"x": [1, {"y": float("-inf")}]}), "not finite"),
    (lambda c: c.record_tool_call("s1", "t", {"n": float("inf")}), "not finite"),
    (lambda c: c.search_documents(("n",), limit=0), "limit"),
    (lambda c: c.search_documents(("n",), offset=-1), "offset"),
    (lambda c: c.search_documents(("n",), filter={"x": {"$regex": "a"}}), "operator"),
    # The query reaches the tokenizer, which a lone surrogate once made a 500 over HTTP.
    (lambda c: c.search_documents(("n",), query="flight \ud800"), "query contains a lone "
     "surrogate"),
    (lambda c: c.search_documents(("n",), query=" \n"), "query must not be blank"),
    (lambda c: c.search_documents(("n",), query=5), "query must be a string or None"),
    (lambda c: c.search_documents(("n",), query="q" * 65537), "query is 65537 bytes"),
])
def test_bad_calls_are_refused_with_the_problem_named(client: MemoryClient, call: Any,
                                                      reason: str) -> None:
    client.put_document(("n",), "k0", {"x": 1})
    client.flush()
    with pytest.raises(ValidationError, match=reason):
        call(client)


@GENERATED
@given(st.recursive(st.none() | st.booleans() | st.integers() | st.text(max_size=5),
                    lambda inner: st.dictionaries(st.text(max_size=4), inner, max_size=3),
                    max_leaves=6))
def test_a_value_matches_itself_field_by_field(value: Any) -> None:
    assert matches(value, value)
    if isinstance(value, dict) and value:
        assert not matches(value, {**value, "\x00absent": 1})


def test_filter_operators_compare_numbers_only() -> None:
    assert matches({"n": 3}, {"n": {"$gt": 2, "$lte": 3}})
    assert not matches({"n": "3"}, {"n": {"$gt": 2}})
    assert not matches({"n": True}, {"n": {"$gte": 1}})
    assert matches({"n": None}, {"n": {"$ne": 1}})


@pytest.mark.model
def test_a_ranked_page_is_its_slice_of_the_whole_ranking_values_included(
        client: MemoryClient) -> None:
    """Ranked by a query, the documents are read without their values and the page's
    alone read whole afterwards: the page must be what slicing the ranking gave."""
    texts = ["a flight to Lisbon", "the dog's vet appointment", "a hotel in Porto",
             "the night train to Madrid", "tax forms due in April"]
    for i, text in enumerate(texts):
        client.put_document(("trips",), f"d{i}", {"i": i, "blob": "x" * 2000}, text=text)
    client.put_document(("trips",), "plain", {"i": 99})  # no vector: ranked last
    client.flush()
    whole = client.search_documents(("trips",), query="travelling by plane", limit=100)
    assert [h.document.key for h in whole][-1] == "plain"
    assert whole[0].document.key == "d0"
    assert all(h.document.value["i"] in (*range(5), 99) for h in whole)
    for limit, offset in ((1, 0), (2, 1), (3, 4), (2, 6)):
        page = client.search_documents(("trips",), query="travelling by plane", limit=limit,
                                       offset=offset)
        assert ([(h.document, h.score) for h in page]
                == [(h.document, h.score) for h in whole[offset:offset + limit]])
