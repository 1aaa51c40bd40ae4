"""The recall profile: fusion rules, neighbouring turns, the budget, explanations, settings.

The rules are tested as plain functions first (producers/ranking/fusion.py, the budgeted
combiner), then end to end: a real writer keeps the lexical index, the real model embeds
(vectors reach the database as ``message.embedded`` events through the inbox).
"""

from __future__ import annotations

import dataclasses
import itertools
import threading
from collections.abc import Collection, Iterable, Sequence
from typing import Any

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.extra.numpy import arrays

from memq import ContextItem, MemoryClient
from memq.config import Config, RetrievalConfig, from_mapping
from memq.embedding import Embedder
from memq.errors import ConfigError
from memq.producers.ranking.fusion import (
    Candidate,
    best_of,
    distinct,
    feedback_query,
    fuse,
    named,
    with_neighbours,
)
from memq.producers.ranking.profiles import Hit, Relevance, budgeted, profile_for
from memq.store.read import lexical as lexical_query
from memq.store.read.messages import Message
from memq.store.read.names import Named
from memq.store.read.scope import Scope
from tests.embedding_events import send_embeddings
from tests.faults.hostile import SQL_LOOKING

FILLER = [
    "I spent the afternoon reorganising the bookshelf by colour.",
    "The bus was late again, so I walked most of the way.",
    "We should try that new ramen place downtown sometime.",
    "My phone battery keeps dying before lunch.",
    "The neighbours are renovating their kitchen, it is so loud.",
    "I finally finished that thousand-piece puzzle.",
    "It rained all weekend and the basement flooded a little.",
    "Work has been hectic with the quarterly planning.",
]


def message(mid: str, minute: int = 0) -> Message:
    return Message(mid, "s1", "user", f"turn {mid}", f"2026-01-01T00:{minute:02d}:00Z", 0.5)


# -- the fusion rules, as functions ------------------------------------------------------

def test_fusion_adds_each_branch_share_of_its_best() -> None:
    # z: a = (0.5 - 0.3) / 0.1 = 2, c = 5 (the best); BM25 best: a = 10.
    ranked = fuse(["a", "b", "c"], {"a": 10.0, "b": 5.0}, {"a": 0.5, "c": 0.8},
                  (0.3, 0.1), lexical_weight=0.5, min_z=0.5)
    by_id = {c.id: c for c in ranked}
    assert [c.id for c in ranked] == ["a", "c", "b"]
    assert by_id["a"].own == pytest.approx(0.5 * 1 + 0.5 * 2 / 5)
    assert by_id["c"].own == pytest.approx(0.5)
    assert by_id["b"].own == pytest.approx(0.25)
    assert by_id["a"].branches == ("lexical", "semantic")
    assert by_id["b"].branches == ("lexical",)
    assert by_id["c"].branches == ("semantic",)


def test_a_cosine_below_the_calibrated_floor_is_not_evidence() -> None:
    ranked = fuse(["a", "b"], {"a": 1.0}, {"a": 0.32, "b": 0.9}, (0.3, 0.1),
                  lexical_weight=0.5, min_z=0.5)
    a = next(c for c in ranked if c.id == "a")
    assert a.z is None  # z = 0.2 < 0.5: its cosine is kept for the record only
    assert a.similarity == pytest.approx(0.32)
    assert a.own == pytest.approx(0.5)
    assert a.branches == ("lexical",)


@pytest.mark.parametrize("moments", [None, (0.5, 0.0)])
def test_without_a_spread_semantic_evidence_is_not_used(
    moments: tuple[float, float] | None
) -> None:
    ranked = fuse(["a", "b"], {"b": 2.0}, {"a": 0.9}, moments, 0.5, 0.0)
    assert [(c.id, c.own) for c in ranked] == [("b", 0.5), ("a", 0.0)]


@pytest.mark.parametrize(("weight", "first"), [(1.0, "lex"), (0.0, "sem")])
def test_the_weight_moves_the_balance(weight: float, first: str) -> None:
    ranked = fuse(["lex", "sem"], {"lex": 3.0}, {"sem": 0.9, "lex": 0.35}, (0.3, 0.1),
                  weight, 0.5)
    assert ranked[0].id == first


def test_ties_go_to_the_later_turn() -> None:
    ranked = fuse(["01", "02", "03"], {"01": 1.0, "02": 1.0, "03": 1.0}, {}, None, 0.5, 0.5)
    assert [c.id for c in ranked] == ["03", "02", "01"]


def test_the_turn_after_a_match_inherits_a_share_of_its_score() -> None:
    ranked = [Candidate("q", own=0.8), Candidate("x", own=0.1), Candidate("y", own=0.9)]
    after = with_neighbours(ranked, {"q": "answer", "x": "y", "y": "x"}, share=0.7)
    by_id = {c.id: c for c in after}
    assert by_id["answer"].fused == pytest.approx(0.56)
    assert by_id["answer"].neighbour_of == "q"
    assert by_id["answer"].branches == ("neighbour",)
    assert by_id["answer"].scores() == {"neighbour": pytest.approx(0.56),
                                        "fused": pytest.approx(0.56)}
    # y keeps its own, larger score; x inherits from y (0.63 > its own 0.1).
    assert by_id["y"].neighbour_of is None
    assert by_id["y"].fused == pytest.approx(0.9)
    assert by_id["x"].neighbour_of == "y"
    assert by_id["x"].fused == pytest.approx(0.63)
    assert [c.id for c in after] == ["y", "q", "x", "answer"]


def test_of_two_predecessors_the_larger_share_counts() -> None:
    ranked = [Candidate("weak", own=0.2), Candidate("strong", own=0.9)]
    after = with_neighbours(ranked, {"weak": "n", "strong": "n"}, share=0.5)
    n = next(c for c in after if c.id == "n")
    assert (n.neighbour_of, n.fused) == ("strong", pytest.approx(0.45))


UNIT_ROWS = arrays(np.float64, st.tuples(st.integers(1, 4), st.just(8)),
                  elements=st.floats(-1, 1)).filter(
    lambda rows: bool((np.linalg.norm(rows, axis=1) > 1e-3).all()))


def _unit(v: np.ndarray) -> np.ndarray:
    return v / np.linalg.norm(v, axis=-1, keepdims=True)


@settings(deadline=None)
@given(UNIT_ROWS, st.floats(0.0, 10.0))
def test_the_feedback_query_is_a_unit_vector_nearer_the_hits(
    rows: np.ndarray, weight: float
) -> None:
    query, found = _unit(rows[0]), _unit(rows)
    moved = feedback_query(query, found, weight)
    mean = found.mean(axis=0)
    if np.linalg.norm(mean) < 1e-6 or np.linalg.norm(query + weight * _unit(mean)) < 1e-6:
        return  # nothing to move towards, or nothing left: None, or a direction of noise
    assert moved is not None
    assert moved.dtype == np.float32
    assert float(np.linalg.norm(moved)) == pytest.approx(1.0, abs=1e-5)
    towards = _unit(mean)
    assert float(moved @ towards) >= float(query @ towards) - 1e-5
    if weight == 0.0:
        np.testing.assert_allclose(moved, query, atol=1e-5)


def test_no_feedback_query_without_hits_or_direction() -> None:
    query = np.eye(4, dtype=np.float32)[0]
    assert feedback_query(query, np.zeros((0, 4), dtype=np.float32), 1.0) is None
    assert feedback_query(query, np.array([[0, 1, 0, 0], [0, -1, 0, 0]]), 1.0) is None
    assert feedback_query(query, -query[None, :], 1.0) is None  # cancels the query out


def test_of_two_rounds_each_turn_keeps_its_better_score() -> None:
    first = [Candidate("a", own=0.9), Candidate("b", own=0.4, lexical=2.0)]
    second = [Candidate("b", own=0.6, similarity=0.7, z=1.0), Candidate("a", own=0.9),
              Candidate("c", own=0.5, z=0.8)]
    by_id = {c.id: c for c in best_of(first, second)}
    assert [c.id for c in best_of(first, second)] == ["a", "b", "c"]
    assert by_id["a"].feedback is False  # a tie keeps the first round's
    assert (by_id["b"].own, by_id["b"].feedback) == (0.6, True)
    assert by_id["c"].branches == ("semantic", "feedback")


def test_of_near_copies_the_best_ranked_stays() -> None:
    e = np.eye(4)
    copy = _unit(e[0] + 0.05 * e[1])  # cosine 0.9988 with e[0]
    ranked = [Candidate(mid, own=own) for mid, own in
              (("a", 0.9), ("x", 0.8), ("b", 0.7), ("c", 0.6), ("d", 0.5))]
    vectors = {"a": e[0], "b": copy, "c": e[2], "d": e[0]}  # x has no vector yet
    assert [c.id for c in distinct(ranked, vectors, 0.99)] == ["a", "x", "c"]
    assert [c.id for c in distinct(ranked, vectors, 0.999)] == ["a", "x", "b", "c"]
    # 1: exact copies only, whatever the rounding of what is stored.
    rounded = {**vectors, "d": e[0] * (1 - 5e-5)}
    assert [c.id for c in distinct(ranked, rounded, 1.0)] == ["a", "x", "b", "c"]


@settings(max_examples=60, deadline=None)
@given(arrays(np.float64, st.tuples(st.integers(1, 12), st.just(3)),
              elements=st.sampled_from([-1.0, 0.0, 0.5, 1.0, 2.0])),
       st.floats(0.5, 1.0))
def test_distinct_keeps_each_candidate_unless_a_kept_better_one_is_near(
        rows: np.ndarray, cosine: float) -> None:
    """Generated vectors with many exact and near repeats: what stays is in its order, no
    two kept are near, and each left out is near one kept above it."""
    norms = np.linalg.norm(rows, axis=1)
    ranked = [Candidate(f"{n:02d}", own=1.0 - n / 100) for n in range(len(rows))]
    vectors = {c.id: row / norm for c, row, norm in zip(ranked, rows, norms, strict=True)
               if norm > 0}  # a zero row stands for a turn without a vector
    kept = distinct(ranked, vectors, cosine)
    ids = [c.id for c in kept]
    assert ids == sorted(ids)
    near = lambda a, b: float(vectors[a] @ vectors[b]) >= cosine - 1e-4  # noqa: E731
    with_vectors = [i for i in ids if i in vectors]
    assert not any(near(a, b) for a, b in itertools.combinations(with_vectors, 2))
    for c in ranked:
        if c.id not in ids:
            assert any(near(c.id, k) for k in with_vectors if k < c.id)


def test_candidates_of_sessions_that_name_no_one_asked_about_lose_a_share() -> None:
    ranked = [Candidate("a", own=0.9), Candidate("b", own=0.8), Candidate("c", own=0.5)]
    after = named(ranked, {"b"}, 0.3)
    assert [(c.id, c.own) for c in after] == [
        ("b", 0.8), ("a", pytest.approx(0.63)), ("c", pytest.approx(0.35))]
    assert [c.scores().get("name_penalty") for c in after] == [None, 0.3, 0.3]
    assert named(ranked, set(), 0.3) == ranked  # no session names them: nothing to prefer
    assert named(ranked, {"b"}, 0.0) == ranked


@given(st.lists(st.floats(0.0, 1.0), min_size=1, max_size=12),
       st.sets(st.integers(0, 11)), st.floats(0.01, 1.0))
def test_the_name_rule_keeps_the_order_within_each_side(
    scores: list[float], naming: set[int], penalty: float
) -> None:
    ranked = sorted((Candidate(f"{i:02d}", own=s) for i, s in enumerate(scores)),
                    key=lambda c: (c.fused, c.id), reverse=True)
    ids = {f"{i:02d}" for i in naming}
    after = named(ranked, ids, penalty)
    assert sorted(c.id for c in after) == sorted(c.id for c in ranked)
    for side in (True, False):
        assert [c.id for c in after if (c.id in ids) is side] == [
            c.id for c in ranked if (c.id in ids) is side]
    if ids & {c.id for c in ranked}:
        kept = {c.id: c.own for c in ranked}
        assert all(c.own == (kept[c.id] if c.id in ids else kept[c.id] * (1 - penalty))
                   for c in after)


def test_the_budget_counts_each_message_once() -> None:
    m = [message(str(i), i) for i in range(8)]
    combine = budgeted(5)
    found = combine([
        ("recency", [Hit(m[6], 2.0), Hit(m[7], 1.0)]),
        ("importance", [Hit(m[7], 0.9)]),  # already in: costs nothing
        ("relevance", [Hit(m[i], 1.0 - i / 10, {"fused": 1.0 - i / 10}, ("lexical",))
                       for i in (7, 0, 1, 2, 3, 4)]),
    ])
    assert [f.message.id for f in found] == ["0", "1", "2", "6", "7"]  # oldest first
    seven = found[-1]
    assert seven.branches == ["recency", "importance", "lexical"]
    assert seven.scores == {"recency": 1.0, "importance": 0.9, "fused": pytest.approx(0.3)}


class Turns:
    """Sources over a fixed list of turns: BM25 and cosines given per turn id."""

    def __init__(self, bm25: dict[str, float], cosine: dict[str, float], n: int = 30) -> None:
        self.turns = [message(f"{i:02d}", i) for i in range(n)]
        self.bm25, self.cosine = bm25, cosine
        self.asked: list[list[str]] = []
        self.named: set[str] = set()
        self.named_scope: Named | None = None
        self.left_out: list[Collection[str]] = []
        self.naming_sessions: list[Collection[str] | None] = []

    def lexical_scores(self, session_id: str, query: str, limit: int,
                       leave_out: Collection[str] = ()) -> list[tuple[str, float]]:
        self.left_out.append(leave_out)
        return sorted(self.bm25.items(), key=lambda p: -p[1])[:limit]

    def semantic_moments(self, session_id: str, query: str,
                         *, keys: bool = False) -> tuple[float, float]:
        return 0.3, 0.1

    def similar_scores(self, session_id: str, query: str, threshold: float,
                       limit: int, *, keys: bool = False) -> list[tuple[str, float]]:
        found = [(mid, c) for mid, c in self.cosine.items() if c > threshold]
        return sorted(found, key=lambda p: -p[1])[:limit]

    def similarities(self, session_id: str, query: str, ids: Iterable[str],
                     *, keys: bool = False) -> dict[str, float]:
        return {mid: self.cosine[mid] for mid in ids if mid in self.cosine}

    def following(self, session_id: str, ids: Iterable[str]) -> dict[str, Message]:
        wanted = list(ids)
        self.asked.append(wanted)
        pairs = itertools.pairwise(self.turns)
        return {m.id: n for m, n in pairs if m.id in wanted}

    def messages(self, ids: list[str]) -> list[Message]:
        return [m for m in self.turns if m.id in ids]

    def vectors(self, session_id: str, ids: Sequence[str],
                *, turned: bool = False) -> dict[str, np.ndarray]:
        return {}  # the semantic scores are given: no vectors behind them

    def naming(self, scope: Scope, query: str, ids: Sequence[str],
               sessions: Collection[str] | None = None) -> set[str]:
        self.naming_sessions.append(sessions)
        return {mid for mid in ids if mid in self.named}

    def named_turns(self, scope: Scope, query: str, limit: int) -> Named | None:
        return self.named_scope

    def best_among(self, scope: Scope, query: str, ids: Sequence[str], limit: int,
                   *, keys: bool = False) -> list[tuple[str, float]]:
        found = [(mid, self.cosine[mid]) for mid in ids if mid in self.cosine]
        return sorted(found, key=lambda p: -p[1])[:limit]


class VectorTurns(Turns):
    """Turns with real vectors: the semantic reads score them against the query's vector
    (``QUERY`` for any text), as the vector cache does."""

    def __init__(self, vectors: dict[str, np.ndarray], bm25: dict[str, float]) -> None:
        super().__init__(bm25, {}, n=len(vectors))
        self.ids = list(vectors)
        self.matrix = np.array([vectors[i] for i in self.ids], dtype=np.float32)

    def query_vector(self, query: str) -> np.ndarray:
        return QUERY

    def _dots(self, query: str | np.ndarray) -> dict[str, float]:
        q = query if isinstance(query, np.ndarray) else QUERY
        return dict(zip(self.ids, (self.matrix @ q).tolist(), strict=True))

    def semantic_moments(self, session_id: str, query: Any,  # type: ignore[override]
                         *, keys: bool = False) -> tuple[float, float]:
        dots = np.array(list(self._dots(query).values()))
        return float(dots.mean()), float(dots.std())

    def similar_scores(self, session_id: str, query: Any,  # type: ignore[override]
                       threshold: float, limit: int, *, keys: bool = False
                       ) -> list[tuple[str, float]]:
        found = [(mid, c) for mid, c in self._dots(query).items() if c > threshold]
        return sorted(found, key=lambda p: -p[1])[:limit]

    def similarities(self, session_id: str, query: Any,  # type: ignore[override]
                     ids: Iterable[str], *, keys: bool = False) -> dict[str, float]:
        dots = self._dots(query)
        return {mid: dots[mid] for mid in ids if mid in dots}

    def vectors(self, session_id: str, ids: Sequence[str],
                *, turned: bool = False) -> dict[str, np.ndarray]:
        return {i: self.matrix[self.ids.index(i)] for i in ids if i in self.ids}


QUERY = np.eye(16, dtype=np.float32)[0]


def test_the_feedback_round_finds_what_the_first_matches_are_about() -> None:
    """The question is near 00 (and 01), which is about what 02 says in other words: 02
    is not near the question, but near the query moved towards 00 and 01."""
    rng = np.random.default_rng(3)
    e = np.eye(16, dtype=np.float32)
    # The other turns are about neither: orthogonal to both directions.
    vectors = {f"{i:02d}": _unit(np.r_[0, 0, rng.standard_normal(14)]).astype(np.float32)
               for i in range(3, 30)}
    vectors |= {"00": _unit(e[0] + e[1]), "01": _unit(e[0] + 0.8 * e[1]), "02": e[1]}
    without = relevance(limit=5, neighbour_share=0.0).find(
        VectorTurns(vectors, {}), "s1", "q")  # type: ignore[arg-type]
    assert "02" not in [h.message.id for h in without]
    hits = relevance(limit=5, neighbour_share=0.0, feedback=1.0, feedback_turns=2).find(
        VectorTurns(vectors, {}), "s1", "q")  # type: ignore[arg-type]
    found = {h.message.id: h for h in hits}
    assert "02" in found
    assert found["02"].branches == ("semantic", "feedback")
    assert {h.message.id for h in hits[:2]} == {"00", "01"}  # the first round's best stay


def relevance(limit: int = 6, **overrides: Any) -> Relevance:
    settings = {"candidates": 50, "lexical_weight": 0.5, "min_z": 0.5, "neighbour_share": 0.7}
    return Relevance(limit, **{**settings, **overrides})


def test_relevance_counts_each_turn_once_with_all_its_evidence() -> None:
    # 03 is found by both branches; 05 only lexically, its cosine is read all the same
    # (z = 0.3, under min_z: on the record, not evidence); 20 has no vector.
    turns = Turns({"03": 8.0, "05": 4.0, "20": 2.0}, {"03": 0.7, "05": 0.33, "11": 0.8})
    hits = relevance(limit=10, neighbour_share=0.0).find(turns, "s1", "q")  # type: ignore[arg-type]
    assert [h.message.id for h in hits] == ["03", "11", "05", "20"]
    assert [h.score for h in hits] == pytest.approx([0.5 + 0.5 * 4 / 5, 0.5, 0.25, 0.125])
    five = hits[2]
    assert five.details == {"lexical": 4.0, "semantic": pytest.approx(0.33), "fused": 0.25}
    assert five.branches == ("lexical",)
    assert hits[0].branches == ("lexical", "semantic")


def test_relevance_asks_for_the_successors_of_its_best_only() -> None:
    turns = Turns({f"{i:02d}": 30.0 - i for i in range(0, 20, 2)}, {})
    hits = relevance(limit=6).find(turns, "s1", "q")  # type: ignore[arg-type]
    assert turns.asked == [["00", "02", "04", "06", "08", "10"]]
    # Shares of the best BM25, halved: 00 0.5, 02 0.47, ... 10 0.33; 01 inherits 0.35.
    assert [h.message.id for h in hits] == ["00", "02", "04", "06", "08", "01"]
    assert hits[-1].neighbour_of == "00"
    assert hits[-1].score == pytest.approx(0.35)


def test_relevance_prefers_the_sessions_that_name_who_is_asked_about() -> None:
    turns = Turns({"03": 8.0, "05": 7.0}, {})
    turns.named = {"05"}
    asked = Scope("s1", "user", "u1")
    plain = relevance(limit=4, neighbour_share=0.0).find(turns, asked, "q")  # type: ignore[arg-type]
    rule = relevance(limit=4, neighbour_share=0.0, name_penalty=0.3)
    assert [h.message.id for h in plain] == ["03", "05"]
    assert [h.message.id for h in rule.find(turns, asked, "q")] == ["05", "03"]  # type: ignore[arg-type]
    # Within one session every turn names alike: the rule is not asked.
    assert [h.message.id for h in rule.find(turns, Scope("s1"), "q")] == ["03", "05"]  # type: ignore[arg-type]


def test_the_sessions_that_name_whom_is_asked_about_are_searched_as_a_scope_of_their_own(
) -> None:
    """Two candidates of each kind: the scope's best are elsewhere (00, 01 by words; 05, 06
    by meaning); the named sessions' own best (10 by words, 11 by meaning) join them, the
    name is left out of the lexical search, and rule 6 puts them first."""
    turns = Turns({"00": 9.0, "01": 8.0, "02": 7.0, "10": 1.0},
                  {"00": 0.5, "05": 0.9, "06": 0.85, "11": 0.6})
    turns.named = {"10", "11"}
    turns.named_scope = Named(["caroline"], ["10", "11"], frozenset({"s7"}))
    asked = Scope("s1", "user", "u1")
    rule = relevance(limit=10, candidates=2, neighbour_share=0.0, name_penalty=0.7,
                     named_turns=100)
    hits = [h.message.id for h in rule.find(turns, asked, "q")]  # type: ignore[arg-type]
    assert hits[0] == "11"
    assert "10" in hits
    assert turns.left_out == [["caroline"]]
    assert turns.naming_sessions == [frozenset({"s7"})]  # rule 6 is told the sessions found
    without = dataclasses.replace(rule, named_turns=0)
    hits = [h.message.id for h in without.find(turns, asked, "q")]  # type: ignore[arg-type]
    assert not {"10", "11"} & set(hits)
    assert turns.left_out[-1] == ()
    assert turns.naming_sessions[-1] is None  # and without them looks them up itself
    # Within one session every turn names alike: no scope of its own either.
    rule.find(turns, Scope("s1"), "q")  # type: ignore[arg-type]
    assert turns.left_out[-1] == ()


# -- end to end --------------------------------------------------------------------------

def recall_client(config: Config, clients: list[MemoryClient], embedder: Embedder | None = None,
                  **settings: Any) -> MemoryClient:
    retrieval = dataclasses.replace(config.retrieval, profile="recall", **settings)
    client = MemoryClient(config=config.replace(retrieval=retrieval))
    if embedder is not None:
        client.query_vectors.embedder = embedder
    clients.append(client)
    return client


def record(client: MemoryClient, texts: Sequence[str], embedder: Embedder | None = None,
           session: str = "s1") -> list[str]:
    ids = [client.append(session, "user" if i % 2 else "assistant", text)
           for i, text in enumerate(texts)]
    client.flush()
    if embedder is not None:
        send_embeddings(client, ids, embedder.embed(list(texts)))
    return ids


def conversation() -> list[str]:
    """Forty turns; a question about Lisbon, its answer right after, no Lisbon in it."""
    turns = [FILLER[i % len(FILLER)] + f" (day {i})" for i in range(40)]
    turns[12] = "Did you ever make it to Lisbon for that conference?"
    turns[13] = "Yes! In March. The talks were dull but the custard tarts made up for it."
    return turns


def by_id(items: list[ContextItem]) -> dict[str, ContextItem]:
    return {item.id: item for item in items}


@pytest.mark.redis
@pytest.mark.model
def test_recall_finds_the_match_and_the_answer_after_it(
    config: Config, clients: list[MemoryClient], embedder: Embedder
) -> None:
    client = recall_client(config, clients, embedder)
    ids = record(client, conversation(), embedder)
    items = by_id(client.get_context("s1", "When did they go to Lisbon?"))
    match, answer = items[ids[12]], items[ids[13]]
    assert match.branches[0] == "lexical"
    assert "semantic" in match.branches
    assert match.lexical is not None
    assert match.lexical > 0
    assert match.similarity is not None
    assert match.fused is not None
    assert set(match.scores) >= {"lexical", "semantic", "semantic_z", "fused"}
    assert match.scores["lexical"] == match.lexical
    assert match.scores["semantic"] == match.similarity
    assert answer.neighbour_of == ids[12]
    assert "neighbour" in answer.branches
    assert answer.fused == pytest.approx(0.7 * match.fused)  # the match's own score, shared
    assert answer.lexical is None
    assert answer.to_dict()["neighbour_of"] == ids[12]


@pytest.mark.redis
@pytest.mark.model
@pytest.mark.parametrize("cosine", [0.99, 1.0])
def test_a_repeated_tool_output_takes_one_place(
    config: Config, clients: list[MemoryClient], embedder: Embedder, cosine: float
) -> None:
    """A deploy retried four times left four copies of its failure far behind the recent
    window: the question gets one copy, and the places the others would take go to the
    next relevant turn (with any setting: the copies are exact)."""
    turns = [FILLER[i % len(FILLER)] + f" (day {i})" for i in range(40)]
    turns[3] = turns[7] = turns[11] = turns[15] = (
        "Deploy of billing-api failed: node-7 out of disk space on /var/lib/docker.")
    turns[22] = "Runbook for a failed billing-api deploy: prune old docker images on the node."
    client = recall_client(config, clients, embedder, recall_budget=16,
                           recall_duplicate_cosine=cosine)
    ids = record(client, turns, embedder)
    items = client.get_context("s1", "Why did the billing-api deploy fail on node-7?")
    found = [ids.index(item.id) for item in items if "recency" not in item.scores]
    assert len({3, 7, 11, 15} & set(found)) == 1, found
    assert 22 in found


def look_alike(name: str, friend: str, answer: str) -> list[str]:
    """A talk between two people; the answer to what one of them painted names no one."""
    return [f"{name}: I've been out by the lake every morning lately.",
            f"{friend}: That's wonderful! What did you do there?", answer,
            f"{friend}: I'd love to see it sometime."]


@pytest.mark.redis
@pytest.mark.model
@pytest.mark.parametrize("penalty", [0.0, 0.7])
def test_a_question_about_someone_is_answered_from_the_sessions_that_name_them(
    config: Config, clients: list[MemoryClient], embedder: Embedder, penalty: float
) -> None:
    """Two look-alike talks, with Caroline and with Priya; Priya's answer says "painted",
    Caroline's does not, and neither names anyone. Asked what Caroline painted, with one
    place for relevance: without rule 6 it goes to Priya's talk, with it to Caroline's."""
    client = recall_client(config, clients, embedder, recall_name_penalty=penalty,
                           recall_budget=4)
    texts = {"first": look_alike("Caroline", "Melanie", "A sunset over the water."),
             "second": look_alike("Priya", "Tom", "I painted a sunset over the water."),
             "asking": FILLER[:3]}
    ids = {client.append(session, "user", text, user_id="u"): session
           for session, turns in texts.items() for text in turns}
    client.flush()
    send_embeddings(client, list(ids), embedder.embed([t for ts in texts.values() for t in ts]))
    items = client.get_context("asking", "What did Caroline paint?", scope="user")
    relevant = [item for item in items if "recency" not in item.branches]
    assert [ids[item.id] for item in relevant] == (["first"] if penalty else ["second"])
    assert "name_penalty" not in relevant[0].scores  # Caroline's session, or no rule
    wide = recall_client(config, clients, embedder, recall_name_penalty=penalty)
    items = wide.get_context("asking", "What did Caroline paint?", scope="user")
    explained = {(ids[item.id], item.scores.get("name_penalty")) for item in items
                 if "recency" not in item.branches}
    assert explained == ({("first", None), ("second", 0.7)} if penalty
                         else {("first", None), ("second", None)})


@pytest.mark.redis
@pytest.mark.model
def test_recall_keeps_recency_and_the_budget(
    config: Config, clients: list[MemoryClient], embedder: Embedder
) -> None:
    client = recall_client(config, clients, embedder)
    ids = record(client, conversation(), embedder)
    query = "What happened with the basement and the puzzle?"
    items = client.get_context("s1", query)
    # The thread of the conversation (the last 10 turns) always; only turns with evidence
    # come after it: here fewer than the budget.
    assert 10 < len(items) <= 30
    assert [item.id for item in items if "recency" in item.branches] == ids[-10:]
    assert all(item.fused is not None for item in items if "recency" not in item.branches)
    order = [(i.created_at, i.id) for i in items]
    assert order == sorted(order)  # oldest first
    tight = recall_client(config, clients, embedder, recall_budget=8,
                          recall_recency_limit=2)
    kept = tight.get_context("s1", query)
    assert len(kept) == 8
    assert [item.id for item in kept if "recency" in item.branches] == ids[-2:]
    best = sorted((i for i in items if "recency" not in i.branches),
                  key=lambda i: -(i.fused or 0))
    window = set(ids[-10:])
    assert {i.id for i in kept} - set(ids[-2:]) <= {i.id for i in best[:6 + 2]} | window
    small = recall_client(config, clients, embedder, recall_budget=1)
    assert [item.id for item in small.get_context("s1", "basement")] == ids[-1:]


@pytest.mark.redis
@pytest.mark.model
def test_a_scope_of_every_turn_is_searched_without_its_token_once_its_vectors_are_held(
    config: Config, clients: list[MemoryClient], embedder: Embedder,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The vectors a reader holds for the scope tell the lexical search that the scope is
    the whole history (store/read/lexical.py, WHOLE_SHARE): the search then leaves the
    scope's token out, and the answer is the one the search inside the scope gives."""
    client = recall_client(config, clients, embedder)
    record(client, conversation(), embedder)
    question = "When did they go to Lisbon?"
    inside = client.get_context("s1", question)  # the first call loads the vectors
    whole: list[int] = []
    searched = lexical_query._whole

    def counted(*args: Any) -> list[tuple[str, float]] | None:
        whole.append(1)
        return searched(*args)

    monkeypatch.setattr(lexical_query, "_whole", counted)
    assert client.get_context("s1", question) == inside
    assert whole == [1]
    monkeypatch.setattr(lexical_query, "WHOLE_SHARE", 2.0)  # never: the scoped search
    assert client.get_context("s1", question) == inside
    assert whole == [1]


@pytest.mark.redis
@pytest.mark.model
def test_recall_works_before_anything_is_embedded(
    config: Config, clients: list[MemoryClient], embedder: Embedder
) -> None:
    client = recall_client(config, clients, embedder, recall_recency_limit=0)
    ids = record(client, conversation())
    items = by_id(client.get_context("s1", "Lisbon conference"))
    assert items[ids[12]].branches == ("lexical",)
    assert items[ids[12]].similarity is None
    assert items[ids[13]].neighbour_of == ids[12]


@pytest.mark.redis
def test_recall_without_a_query_is_recency_and_importance(
    config: Config, clients: list[MemoryClient]
) -> None:
    client = recall_client(config, clients)
    ids = record(client, conversation())
    important = client.append("s1", "user", "Remember: my passport expires in May.",
                              importance=0.95)
    client.flush()
    items = client.get_context("s1")
    # The last 10 turns (the important one is the newest of them), nothing else.
    assert [item.id for item in items] == [*ids[-9:], important]
    assert items[-1].branches == ("recency", "importance")
    assert all(item.fused is None and item.lexical is None for item in items)


@pytest.mark.redis
@pytest.mark.model
@pytest.mark.parametrize("query", ['"Lisbon', "Lisbon NEAR(x", "AND OR NOT", "*^()", "-:"])
def test_recall_accepts_any_query_text(
    config: Config, clients: list[MemoryClient], embedder: Embedder, query: str
) -> None:
    client = recall_client(config, clients, embedder, recall_recency_limit=0)
    ids = record(client, conversation())
    found = [item.id for item in client.get_context("s1", query)]
    assert (ids[12] in found) == ("lisbon" in query.lower())


@pytest.mark.redis
@pytest.mark.model
def test_recall_finds_attack_looking_text_verbatim(
    config: Config, clients: list[MemoryClient], embedder: Embedder
) -> None:
    client = recall_client(config, clients, embedder, recall_recency_limit=0)
    ids = record(client, [*SQL_LOOKING, *conversation()])
    for text, mid in zip(SQL_LOOKING, ids, strict=False):
        found = [item.id for item in client.get_context("s1", text)]
        assert mid in found, text
    assert len(client.history("s1", limit=100)) == len(SQL_LOOKING) + 40


@pytest.mark.redis
@pytest.mark.model
def test_recall_before_the_database_exists_is_working_memory(
    config: Config, embedder: Embedder
) -> None:
    retrieval = dataclasses.replace(config.retrieval, profile="recall")
    with MemoryClient(config=config.replace(retrieval=retrieval)) as client:  # no writer
        client.query_vectors.embedder = embedder
        mid = client.append("s1", "user", "Lisbon in March")
        assert [item.id for item in client.get_context("s1", "Lisbon")] == [mid]


@pytest.mark.redis
@pytest.mark.model
def test_tri_hybrid_items_carry_no_fusion_scores(
    config: Config, clients: list[MemoryClient], embedder: Embedder
) -> None:
    client = MemoryClient(config=config)
    client.query_vectors.embedder = embedder
    clients.append(client)
    record(client, conversation(), embedder)
    items = client.get_context("s1", "Lisbon")
    assert len(items) == 10
    assert all(i.lexical is None and i.fused is None and i.neighbour_of is None for i in items)
    assert not any(i.semantic_partial for i in items)


# -- settings ----------------------------------------------------------------------------

def test_recall_profile_from_the_file() -> None:
    config = from_mapping({"retrieval": {"profile": "recall", "recall_budget": 12,
                                         "recall_lexical_weight": 0.6}})
    profile = profile_for(config.retrieval)
    assert profile.name == "recall"
    assert [s.name for s in profile.strategies] == ["recency", "importance", "relevance"]
    assert RetrievalConfig().profile == "recall"  # the best measured profile is the default
    seed = profile_for(from_mapping({"retrieval": {"profile": "tri-hybrid"}}).retrieval)
    assert [s.name for s in seed.strategies] == ["recency", "importance", "semantic", "lexical"]
    assert profile_for(RetrievalConfig()).contextual
    assert not seed.contextual
    relevance_branch = profile.strategies[-1]
    assert isinstance(relevance_branch, Relevance)
    assert (relevance_branch.feedback, relevance_branch.feedback_turns) == (1.0, 2)


@pytest.mark.parametrize(("values", "fragment"), [
    ({"recall_budget": 0}, "recall_budget must be at least 1"),
    ({"recall_candidates": 0}, "recall_candidates must be at least 1"),
    ({"recall_recency_limit": -1}, "recall_recency_limit must be at least 0"),
    ({"recall_importance_limit": -2}, "recall_importance_limit must be at least 0"),
    ({"recall_lexical_weight": 1.5}, "recall_lexical_weight must be between 0.0 and 1.0"),
    ({"recall_neighbour_share": -0.1}, "recall_neighbour_share must be between 0.0 and 1.0"),
    ({"recall_context_weight": 1.1}, "recall_context_weight must be between 0.0 and 1.0"),
    ({"reranker_candidates": 0}, "reranker_candidates must be at least 1"),
    ({"recall_feedback": -0.5}, "recall_feedback must be between 0.0 and 10.0"),
    ({"recall_feedback": float("inf")}, "recall_feedback must be between 0.0 and 10.0"),
    ({"recall_feedback_turns": 0}, "recall_feedback_turns must be at least 1"),
    ({"recall_duplicate_cosine": 1.01}, "recall_duplicate_cosine must be between 0.5 and 1.0"),
    ({"recall_duplicate_cosine": 0.2}, "recall_duplicate_cosine must be between 0.5 and 1.0"),
    ({"recall_duplicate_cosine": float("nan")}, "recall_duplicate_cosine must be between"),
    ({"recall_min_z": float("nan")}, "recall_min_z must be between"),
    ({"recall_name_penalty": 1.5}, "recall_name_penalty must be between 0.0 and 1.0"),
    ({"recall_name_penalty": -0.1}, "recall_name_penalty must be between 0.0 and 1.0"),
    ({"recall_named_turns": -1}, "recall_named_turns must be at least 0"),
    ({"recall_named_turns": 2.5}, "recall_named_turns must be int"),
    ({"recall_min_z": "high"}, "recall_min_z must be float"),
    ({"recall_budget": 2.5}, "recall_budget must be int"),
    ({"recall_neighbours": 1}, "unknown key(s) in [retrieval]: recall_neighbours"),
    ({"profile": "recal"}, "profile 'recal' is unknown (known: recall, tri-hybrid)"),
])
def test_bad_recall_settings_are_refused(values: dict[str, Any], fragment: str) -> None:
    with pytest.raises(ConfigError, match=fragment.replace("(", r"\(").replace(")", r"\)")
                       .replace("[", r"\[").replace("]", r"\]")):
        profile_for(from_mapping({"retrieval": values}).retrieval)


def test_the_lexical_search_runs_while_the_semantic_one_does() -> None:
    """Both kinds of evidence are read at once (producers/ranking/alongside.py): the
    lexical read is let through only once the semantic search has begun, so done one after
    the other the call would wait for ever."""
    semantic_began = threading.Event()

    class Concurrent(Turns):
        def lexical_scores(self, *args: Any) -> list[tuple[str, float]]:
            assert semantic_began.wait(10), "the lexical read waited for the semantic one"
            return super().lexical_scores(*args)

        def semantic_moments(self, *args: Any, **kwargs: Any) -> tuple[float, float]:
            semantic_began.set()
            return super().semantic_moments(*args, **kwargs)

    turns = Concurrent({"03": 8.0, "05": 4.0}, {"03": 0.7, "11": 0.8})
    hits = relevance(limit=10, neighbour_share=0.0).find(turns, "s1", "q")  # type: ignore[arg-type]
    assert [h.message.id for h in hits] == ["03", "11", "05"]
