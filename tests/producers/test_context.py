"""get_context: each branch alone and together, thresholds, dedupe, order, bad arguments.

Embeddings come from the real model and reach the database as ``message.embedded``
events through the inbox and the real writer, as the embed workers send them.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Sequence
from datetime import datetime
from typing import Any

import numpy as np
import pytest

from memq import ContextItem, MemoryClient
from memq.config import Config, RetrievalConfig, from_mapping
from memq.embedding import Embedder
from memq.errors import ConfigError, ValidationError
from memq.producers.ranking import profiles as retrieval_module
from memq.producers.ranking.profiles import Hit, Profile, Recency, Sources
from memq.store.read import messages as sources_module
from memq.store.read.messages import Message
from memq.store.read.scope import Scope
from memq.testing import inbox_entries
from tests.embedding_events import send_embeddings

pytestmark = pytest.mark.redis

SISTER = "My sister Ana lives in Lisbon."
PASSWORD = "The production database password rotates on the first Monday of each month."
PEANUTS = "I am allergic to peanuts."
FILLER = "Turn {}: let's keep going with the refactor of the parser."


@pytest.fixture
def config(config: Config) -> Config:
    """These tests are about the branches of the tri-hybrid profile (the seed's numbers),
    which is a named profile, no longer the default."""
    return config.replace(retrieval=dataclasses.replace(config.retrieval, profile="tri-hybrid"))


def make_client(config: Config, embedder: Embedder | None = None, **retrieval: Any) -> MemoryClient:
    settings = dataclasses.replace(config.retrieval, **retrieval)
    client = MemoryClient(config=config.replace(retrieval=settings))
    if embedder is not None:
        client.query_vectors.embedder = embedder  # the same real model, loaded once
    return client


def record(client: MemoryClient, texts: Sequence[str], embedder: Embedder | None = None,
           session: str = "s1", importance: Sequence[float | None] | None = None) -> list[str]:
    """Append ``texts`` (and embed them with the real model when ``embedder`` is given)."""
    weights = importance or [None] * len(texts)
    ids = [client.append(session, "user", text, importance=weight)
           for text, weight in zip(texts, weights, strict=True)]
    client.flush()
    if embedder is not None:
        send_embeddings(client, ids, embedder.embed(list(texts)))
    return ids


def ids_of(items: list[ContextItem]) -> list[str]:
    return [item.id for item in items]


def by_id(items: list[ContextItem]) -> dict[str, ContextItem]:
    return {item.id: item for item in items}


# -- each branch alone -------------------------------------------------------------------

def test_recency_alone_returns_the_last_turns_with_their_rank(
    config: Config, clients: list[MemoryClient]
) -> None:
    client = make_client(config, importance_limit=0, semantic_limit=0)
    clients.append(client)
    ids = record(client, [FILLER.format(i) for i in range(15)])
    items = client.get_context("s1")
    assert ids_of(items) == ids[-10:]
    assert all(item.branches == ("recency",) for item in items)
    assert [item.scores["recency"] for item in items] == [float(r) for r in range(10, 0, -1)]
    assert all(item.similarity is None for item in items)


def test_importance_alone_is_inclusive_and_keeps_the_newest(
    config: Config, clients: list[MemoryClient]
) -> None:
    client = make_client(config, recency_limit=0, semantic_limit=0)
    clients.append(client)
    weights = [0.8, 0.95, 0.81, 0.85, 0.9, 1.0, 0.8, 0.79]
    ids = record(client, [FILLER.format(i) for i in range(8)], importance=weights)
    items = client.get_context("s1")
    # Seven reach 0.8 (two exactly); the newest five of them, oldest first; 0.79 does not.
    assert ids_of(items) == ids[2:7]
    assert [item.scores["importance"] for item in items] == weights[2:7]
    assert all(item.branches == ("importance",) for item in items)


@pytest.mark.parametrize("window", [1, 3, 1000])
def test_importance_finds_the_same_turns_whether_they_are_rare_or_common(
    config: Config, clients: list[MemoryClient], monkeypatch: pytest.MonkeyPatch, window: int
) -> None:
    # A short window holds fewer than `limit` important turns: the importance index is
    # used; a long one holds them all: the walk back from the newest is enough.
    monkeypatch.setattr(sources_module, "IMPORTANCE_WINDOW", window)
    client = make_client(config, recency_limit=0, semantic_limit=0, importance_limit=3)
    clients.append(client)
    weights = [0.9, 0.5, 0.85, 0.5, 0.5, 1.0, 0.5, 0.8, 0.5, 0.5]
    ids = record(client, [FILLER.format(i) for i in range(10)], importance=weights)
    assert ids_of(client.get_context("s1")) == [ids[2], ids[5], ids[7]]


def test_importance_sees_own_appends_before_the_writer_commits(config: Config) -> None:
    settings = dataclasses.replace(config.retrieval, recency_limit=0, semantic_limit=0)
    with MemoryClient(config=config.replace(retrieval=settings)) as client:  # no writer
        important = client.append("s1", "user", PASSWORD, importance=0.9)
        client.append("s1", "user", FILLER.format(1))
        assert ids_of(client.get_context("s1")) == [important]


@pytest.mark.model
def test_semantic_alone_finds_the_best_matches_above_the_threshold(
    config: Config, clients: list[MemoryClient], embedder: Embedder
) -> None:
    client = make_client(config, embedder, recency_limit=0, importance_limit=0)
    clients.append(client)
    texts = [SISTER, PASSWORD, PEANUTS] + [FILLER.format(i) for i in range(5)]
    ids = record(client, texts, embedder)
    items = client.get_context("s1", query="Where does my sister Ana live?")
    assert ids_of(items) == [ids[0]]
    assert items[0].branches == ("semantic",)
    assert items[0].similarity == items[0].scores["semantic"]
    expected = float(embedder.embed(["Where does my sister Ana live?"])[0] @
                     embedder.embed([SISTER])[0])
    # The index stores all but 32 coordinates as int8 (within a cosine of 0.9999 of the
    # vector given: tests/store/test_vector_index.py), so a score is off by ~3e-4.
    assert items[0].similarity == pytest.approx(expected, abs=1e-3)
    assert items[0].similarity > 0.65


@pytest.mark.model
def test_semantic_keeps_the_best_within_its_limit_in_chronological_order(
    config: Config, clients: list[MemoryClient], embedder: Embedder
) -> None:
    client = make_client(config, embedder, recency_limit=0, importance_limit=0,
                         semantic_threshold=-1.0, semantic_limit=3)
    clients.append(client)
    texts = [FILLER.format(1), PEANUTS, SISTER, PASSWORD, FILLER.format(2), "ok"]
    ids = record(client, texts, embedder)
    query = "peanut allergy"
    cosines = embedder.embed(texts) @ embedder.embed([query])[0]
    best = sorted(range(len(texts)), key=lambda i: -cosines[i])[:3]
    items = client.get_context("s1", query=query)
    assert ids_of(items) == [ids[i] for i in sorted(best)]


@pytest.mark.model
def test_semantic_threshold_is_strict(
    config: Config, clients: list[MemoryClient], embedder: Embedder
) -> None:
    probe = make_client(config, embedder, recency_limit=0, importance_limit=0)
    clients.append(probe)
    ids = record(probe, [SISTER, FILLER.format(1)], embedder)
    query = "Where does my sister Ana live?"
    score = probe.get_context("s1", query=query)[0].scores["semantic"]
    at = make_client(config, embedder, recency_limit=0, importance_limit=0,
                     semantic_threshold=score)
    below = make_client(config, embedder, recency_limit=0, importance_limit=0,
                        semantic_threshold=float(np.nextafter(score, -1.0)))
    clients.extend([at, below])
    assert at.get_context("s1", query=query) == []
    assert ids_of(below.get_context("s1", query=query)) == [ids[0]]


@pytest.mark.model
def test_without_a_query_there_is_no_semantic_branch(
    config: Config, clients: list[MemoryClient], embedder: Embedder
) -> None:
    client = make_client(config, embedder)
    clients.append(client)
    record(client, [SISTER, PASSWORD], embedder)
    items = client.get_context("s1")
    assert len(items) == 2
    assert all("semantic" not in item.branches and item.similarity is None for item in items)


# -- together ------------------------------------------------------------------------------

@pytest.mark.model
def test_one_message_found_by_every_branch_appears_once_with_every_score(
    config: Config, clients: list[MemoryClient], embedder: Embedder
) -> None:
    client = make_client(config, embedder)
    clients.append(client)
    ids = record(client, [FILLER.format(1), PEANUTS, FILLER.format(2)], embedder,
                 importance=[None, 0.9, None])
    items = client.get_context("s1", query="peanut allergy")
    assert ids_of(items) == ids
    both = by_id(items)[ids[1]]
    assert both.branches == ("recency", "importance", "semantic")
    assert set(both.scores) == {"recency", "importance", "semantic"}
    assert both.scores["importance"] == 0.9
    assert both.scores["recency"] == 2.0
    # The others have a vector too: their cosine is shown, though it did not pass.
    other = by_id(items)[ids[0]]
    assert other.branches == ("recency",)
    assert other.similarity is not None
    assert other.similarity <= 0.65


@pytest.mark.model
def test_old_important_and_old_relevant_turns_come_back_beside_the_recent_ones(
    config: Config, clients: list[MemoryClient], embedder: Embedder
) -> None:
    client = make_client(config, embedder)
    clients.append(client)
    texts = [PASSWORD, SISTER] + [FILLER.format(i) for i in range(38)]
    weights: list[float | None] = [0.9] + [None] * 39
    ids = record(client, texts, embedder, importance=weights)
    items = client.get_context("s1", query="Where does my sister Ana live?")
    assert ids_of(items) == [ids[0], ids[1], *ids[-10:]]
    found = by_id(items)
    assert found[ids[0]].branches == ("importance",)
    assert found[ids[1]].branches == ("semantic",)
    assert found[ids[1]].similarity is not None
    assert found[ids[1]].similarity > 0.65
    assert all(found[i].branches == ("recency",) for i in ids[-10:])
    created = [item.created_at for item in items]
    assert created == sorted(created)


@pytest.mark.model
def test_the_same_query_is_embedded_once(
    config: Config, clients: list[MemoryClient], embedder: Embedder,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    client = make_client(config, embedder)
    clients.append(client)
    record(client, [SISTER], embedder)
    calls: list[Sequence[str]] = []
    original = embedder.embed
    monkeypatch.setattr(embedder, "embed", lambda texts: calls.append(texts) or original(texts))
    for _ in range(3):
        client.get_context("s1", query="Where does my sister Ana live?")
    assert len(calls) == 1


# -- profiles ------------------------------------------------------------------------------

@dataclasses.dataclass(frozen=True)
class Oldest:
    """A custom branch: the oldest turn still in working memory."""

    name: str = "oldest"

    def find(self, sources: Sources, scope: Scope, query: str | None) -> list[Hit]:
        turns: list[Message] = sources.recent(scope.session_id, 50)
        return [Hit(turns[0], 1.0)] if turns else []


def test_a_registered_profile_plugs_in_new_branches(
    config: Config, clients: list[MemoryClient], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setitem(retrieval_module.PROFILES, "oldest-and-last",
                        lambda settings: Profile("oldest-and-last", (Oldest(), Recency(1))))
    client = make_client(config, profile="oldest-and-last")
    clients.append(client)
    ids = record(client, [FILLER.format(i) for i in range(5)])
    items = client.get_context("s1")
    assert [(item.id, item.branches) for item in items] == [
        (ids[0], ("oldest",)), (ids[-1], ("recency",))]


def test_an_unknown_profile_is_refused_when_the_client_is_built(config: Config) -> None:
    with pytest.raises(ConfigError, match="profile 'fancy' is unknown"):
        make_client(config, profile="fancy")


@pytest.mark.parametrize(("section", "values", "fragment"), [
    ("retrieval", {"recency_limit": -1}, "[retrieval] recency_limit must be at least 0"),
    ("retrieval", {"semantic_limit": -3}, "[retrieval] semantic_limit must be at least 0"),
    ("retrieval", {"importance_threshold": 1.5}, "importance_threshold must be between 0.0"),
    ("retrieval", {"semantic_threshold": math.nan}, "semantic_threshold must be between -1.0"),
    ("retrieval", {"query_cache_size": 0}, "query_cache_size must be at least 1"),
    ("retrieval", {"vector_cache_max_vectors": 0}, "vector_cache_max_vectors must be at least"),
    ("memory", {"working_memory_cap": 0},
     "[memory] working_memory_cap must be between 1 and 1000000"),
    ("memory", {"max_sessions": 0}, "[memory] max_sessions must be between 1 and 100000000"),
])
def test_bad_settings_are_refused(section: str, values: dict[str, Any], fragment: str) -> None:
    with pytest.raises(ConfigError) as caught:
        from_mapping({section: values})
    assert fragment in str(caught.value)


def test_retrieval_defaults_are_the_documented_ones() -> None:
    settings = RetrievalConfig()
    assert (settings.profile, settings.recency_limit, settings.importance_threshold,
            settings.importance_limit, settings.semantic_threshold, settings.semantic_limit) == (
        "recall", 10, 0.8, 5, 0.65, 5)


# -- the item ------------------------------------------------------------------------------

def test_items_are_frozen_and_their_scores_read_only(
    config: Config, clients: list[MemoryClient]
) -> None:
    client = make_client(config)
    clients.append(client)
    record(client, ["hello"])
    item = client.get_context("s1")[0]
    with pytest.raises(dataclasses.FrozenInstanceError):
        item.content = "changed"  # type: ignore[misc]
    with pytest.raises(TypeError):
        item.scores["recency"] = 5.0  # type: ignore[index]
    assert hash(item) == hash(dataclasses.replace(item))
    assert item.to_dict()["scores"] == {"recency": 1.0}


# -- bad arguments -------------------------------------------------------------------------

@pytest.fixture
def idle(idle_client: MemoryClient) -> MemoryClient:
    """A client with no writer, so anything it sent would stay in the inbox."""
    return idle_client


BAD_CONTEXT: list[tuple[dict[str, Any], str]] = [
    ({"session_id": None}, "session_id must be a string, got NoneType"),
    ({"session_id": ""}, "session_id must not be empty"),
    ({"session_id": "x" * 201}, "session_id is 201 characters, over the 200 limit"),
    ({"session_id": "a\nb"}, "session_id contains a control character"),
    ({"query": 42}, "query must be a string or None, got int"),
    ({"query": ""}, "query must not be blank"),
    ({"query": "   "}, "query must not be blank"),
    ({"query": "x" * (64 * 1024 + 1)}, "query is 65537 bytes, over the 65536 byte limit"),
]


@pytest.mark.parametrize(("kwargs", "fragment"), BAD_CONTEXT)
@pytest.mark.remote_too
def test_get_context_refuses_bad_arguments(
    idle: MemoryClient, kwargs: dict[str, Any], fragment: str
) -> None:
    with pytest.raises(ValidationError) as caught:
        idle.get_context(**{"session_id": "s1", **kwargs})
    assert fragment in str(caught.value)


@pytest.mark.parametrize(("kwargs", "fragment"), [
    ({"session_id": 7}, "session_id must be a string, got int"),
    ({"limit": 0}, "limit must be an integer from 1 to 10000, got 0"),
    ({"limit": 10_001}, "got 10001"),
    ({"limit": True}, "got True"),
    ({"limit": "5"}, "got '5'"),
    ({"summaries": "no"}, "summaries must be true or false, got 'no'"),
    ({"summaries": None}, "summaries must be true or false, got None"),
])
@pytest.mark.remote_too
def test_history_refuses_bad_arguments(
    idle: MemoryClient, kwargs: dict[str, Any], fragment: str
) -> None:
    with pytest.raises(ValidationError) as caught:
        idle.history(**{"session_id": "s1", **kwargs})
    assert fragment in str(caught.value)


BAD_APPEND: list[tuple[dict[str, Any], str]] = [
    ({"session_id": ""}, "session_id must not be empty"),
    ({"role": "robot"}, "role must be one of assistant, system, tool, user, got 'robot'"),
    ({"content": b"bytes"}, "content must be a string, got bytes"),
    ({"content": "x" * (64 * 1024 + 1)}, "over the 65536 byte limit"),
    ({"content": "a\x00b"}, "NUL character"),
    ({"importance": math.nan}, "importance must be between 0.0 and 1.0, got nan"),
    ({"importance": 1.5}, "importance must be between 0.0 and 1.0, got 1.5"),
    ({"importance": -0.1}, "got -0.1"),
    ({"importance": "high"}, "importance must be a number, got str"),
    ({"importance": True}, "importance must be a number, got bool"),
    ({"tool_call_id": ""}, "tool_call_id must not be empty"),
    ({"tool_name": 3}, "tool_name must be a string, got int"),
    ({"tool_calls": {"name": "x"}}, "tool_calls must be a list, got dict"),
    ({"tool_calls": [object()]}, "tool_calls cannot be stored as JSON"),
    ({"created_at": datetime(2026, 1, 1)}, "has no time zone"),
    ({"created_at": "yesterday"}, "created_at must be an RFC3339 string"),
    ({"created_at": "2026-01-01T00:00:00"}, "created_at has no time zone offset"),
    ({"created_at": 1700000000}, "created_at must be an RFC3339 string"),
]


@pytest.mark.parametrize(("kwargs", "fragment"), BAD_APPEND)
def test_append_refuses_bad_arguments_and_sends_nothing(
    idle: MemoryClient, kwargs: dict[str, Any], fragment: str
) -> None:
    call = {"session_id": "s1", "role": "user", "content": "hello", **kwargs}
    with pytest.raises(ValidationError) as caught:
        idle.append(**call)
    assert fragment in str(caught.value)
    assert inbox_entries(idle.redis) == 0
    assert "s1" not in idle.working_memory or idle.working_memory.recent("s1", 5) == []


# -- while embedding is behind -----------------------------------------------------------

BEHIND = [SISTER, PASSWORD, *[FILLER.format(i) for i in range(12)]]
"""Two turns worth finding, then enough filler that recency no longer shows them."""


@pytest.mark.model
def test_while_embedding_is_behind_words_still_find_a_turn_and_every_item_says_so(
    config: Config, clients: list[MemoryClient], embedder: Embedder
) -> None:
    client = make_client(config, embedder)
    clients.append(client)
    ids = record(client, BEHIND)  # no vectors: the workers are behind
    items = client.get_context("s1", "Where does my sister Ana live?")
    found = by_id(items)
    assert found[ids[0]].branches == ("lexical",)
    assert found[ids[0]].lexical is not None
    assert found[ids[0]].lexical > 0
    assert ids[1] not in found  # no word of the query in it
    assert all(item.semantic_partial for item in items)
    assert all(item.to_dict()["semantic_partial"] is True for item in items)


@pytest.mark.model
def test_once_embedded_the_meaning_finds_it_and_nothing_is_partial(
    config: Config, clients: list[MemoryClient], embedder: Embedder
) -> None:
    client = make_client(config, embedder)
    clients.append(client)
    ids = record(client, BEHIND, embedder)
    items = client.get_context("s1", "Where does my sister Ana live?")
    found = by_id(items)
    assert found[ids[0]].branches == ("semantic",)
    assert not any(item.semantic_partial for item in items)
    assert all("lexical" not in item.branches for item in items)


@pytest.mark.model
def test_half_embedded_turns_are_found_by_meaning_the_rest_by_words(
    config: Config, clients: list[MemoryClient], embedder: Embedder
) -> None:
    client = make_client(config, embedder)
    clients.append(client)
    ids = record(client, BEHIND)
    send_embeddings(client, ids[1:], embedder.embed(BEHIND[1:]))  # all but the sister turn
    items = client.get_context("s1", "When does the production database password rotate? "
                                     "And where does Ana live?")
    found = by_id(items)
    assert "semantic" in found[ids[1]].branches
    assert found[ids[0]].branches == ("lexical",)  # only the waiting turn is found by words
    assert all(item.semantic_partial for item in items)


@pytest.mark.model
def test_without_a_query_nothing_is_partial_and_the_recall_profile_says_it_too(
    config: Config, clients: list[MemoryClient], embedder: Embedder
) -> None:
    client = make_client(config, embedder)
    recall = make_client(config, embedder, profile="recall")
    clients.extend([client, recall])
    ids = record(client, BEHIND)
    assert not any(item.semantic_partial for item in client.get_context("s1"))
    items = recall.get_context("s1", "Where does my sister Ana live?")
    assert ids[0] in by_id(items)
    assert all(item.semantic_partial for item in items)
