"""Contextual keys: a turn mixed with its neighbours in its own session, kept up to date."""

from __future__ import annotations

from collections.abc import Iterable

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from memq.store.read import neighbourhoods
from memq.store.read.neighbourhoods import Neighbourhoods
from memq.store.read.vector_index import VectorIndex

DIM = 8


def unit(i: int) -> np.ndarray:
    v = np.zeros(DIM, dtype=np.float32)
    v[i % DIM] = 1.0
    return v


class Keyed(Neighbourhoods):
    """Keys beside an index of their turns' own vectors, the two kept as the vector cache
    keeps them: the turns' index first."""

    def __init__(self, weight: float) -> None:
        super().__init__(VectorIndex(DIM), weight)

    def add(self, rows: list[tuple[str, str, int]], vectors: np.ndarray) -> None:
        self.turns.upsert([row[0] for row in rows], vectors, fit=False)
        self.upsert(rows)

    def drop(self, ids: Iterable[str]) -> None:
        ids = list(ids)
        self.turns.remove(ids)
        self.remove(ids)


def expected(weight: float, own: np.ndarray, *around: np.ndarray) -> np.ndarray:
    total = own + sum(around, np.zeros(DIM, dtype=np.float32))
    return (1 - weight) * own + weight * total / np.linalg.norm(total)


def test_a_key_mixes_the_turn_with_its_neighbours_in_the_same_session() -> None:
    keys = Keyed(0.5)
    keys.add([("a", "s1", 1), ("b", "s1", 2), ("c", "s1", 3), ("x", "s2", 4)],
                np.vstack([unit(0), unit(1), unit(2), unit(3)]))
    assert np.allclose(keys.key("b"), expected(0.5, unit(1), unit(0), unit(2)))
    assert np.allclose(keys.key("a"), expected(0.5, unit(0), unit(1)))
    assert np.allclose(keys.key("x"), unit(3))  # alone in its session: its own vector
    query = unit(2)
    scores = keys.index.scores(["a", "b", "c", "x"], query)
    assert scores["b"] > 0.0 == scores["a"] == scores["x"]  # b is found through c


def test_a_late_turn_updates_the_key_of_the_turn_before() -> None:
    keys = Keyed(0.5)
    keys.add([("a", "s", 1)], unit(0)[None])
    assert keys.index.scores(["a"], unit(1))["a"] == 0.0
    keys.add([("b", "s", 2)], unit(1)[None])
    assert keys.index.scores(["a"], unit(1))["a"] > 0.3


def test_a_removed_turn_leaves_no_key_and_no_trace_in_its_neighbours_keys() -> None:
    keys = Keyed(0.5)
    keys.add([("a", "s", 1), ("secret", "s", 2), ("c", "s", 3)],
                np.vstack([unit(0), unit(5), unit(2)]))
    keys.drop(["secret", "unknown"])
    assert "secret" not in keys.index
    assert len(keys) == 2
    left = keys.index.scores(["a", "c"], unit(5))
    assert left == {"a": 0.0, "c": 0.0}  # nothing of the removed vector is left
    assert np.allclose(keys.key("a"), expected(0.5, unit(0), unit(2)))


def test_keys_read_the_turns_index_instead_of_holding_a_copy() -> None:
    """The keys hold one index of their own, no second copy of the turns' vectors, and
    read the turns' index when a neighbour goes."""
    keys = Keyed(0.5)
    keys.add([("a", "s", 1), ("b", "s", 2), ("c", "s", 3)],
             np.vstack([unit(0), unit(1), unit(2)]))
    assert keys.nbytes == keys.index.nbytes == keys.turns.nbytes
    keys.drop(["b"])
    assert np.allclose(keys.key("a"), expected(0.5, unit(0), unit(2)))


@pytest.mark.parametrize("weight", [0.0, 1.5, -0.1])
def test_a_weight_outside_the_range_is_refused(weight: float) -> None:
    with pytest.raises(ValueError, match="weight must be in"):
        Neighbourhoods(VectorIndex(DIM), weight)


@settings(max_examples=40, deadline=None)
@given(st.lists(st.tuples(st.sampled_from("st"), st.integers(0, 30), st.integers(0, 7)),
                min_size=1, max_size=25, unique_by=lambda r: r[1]),
       st.data())
def test_any_order_of_arrivals_and_removals_gives_the_keys_of_what_is_left(
    rows: list[tuple[str, int, int]], data: st.DataObject
) -> None:
    keys = Keyed(0.4)
    for session, seq, axis in rows:  # one at a time, in any order
        keys.add([(f"m{seq}", session, seq)], unit(axis)[None])
    gone = data.draw(st.sets(st.sampled_from([f"m{seq}" for _, seq, _ in rows])))
    keys.drop(gone)
    fresh = Keyed(0.4)
    left = sorted((r for r in rows if f"m{r[1]}" not in gone), key=lambda r: r[1])
    if left:
        fresh.add([(f"m{seq}", session, seq) for session, seq, _ in left],
                     np.vstack([unit(axis) for _, _, axis in left]))
    ids = [f"m{seq}" for _, seq, _ in left]
    for axis in range(DIM):
        assert keys.index.scores(ids, unit(axis)) == pytest.approx(
            fresh.index.scores(ids, unit(axis)), abs=1e-6)
    assert len(keys) == len(left)


class Projected(Neighbourhoods):
    """Keys of 600 turns over 30 sessions, 48 dimensions, projected onto 16 axes."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch, weight: float = 0.5) -> None:
        monkeypatch.setattr(neighbourhoods, "PROJECT_FROM", 256)
        monkeypatch.setattr(neighbourhoods, "KEPT_DIMS", 16)
        rng = np.random.default_rng(4)
        basis = rng.standard_normal((6, 48))
        raw = rng.standard_normal((600, 6)) @ basis + 0.2 * rng.standard_normal((600, 48))
        self.matrix = (raw / np.linalg.norm(raw, axis=1, keepdims=True)).astype(np.float32)
        super().__init__(VectorIndex(48), weight)
        self.ids = [f"m{i}" for i in range(600)]
        self.turns.upsert(self.ids, self.matrix, fit=False)
        self.upsert([(f"m{i}", f"s{i % 30}", i) for i in range(600)])
        self.full = self.index.nbytes / len(self)
        self.fit_if_grown()

    def exact(self, query: np.ndarray) -> dict[str, float]:
        return {i: float(self.key(i) @ query) for i in self.ids if i in self.turns}


@pytest.mark.parametrize("leaders", [neighbourhoods.LEADERS, 200],
                         ids=["every key whole", "the first block's leaders"])
def test_projected_keys_are_scored_exactly_and_find_the_best_in_less_memory(
        monkeypatch: pytest.MonkeyPatch, leaders: int) -> None:
    monkeypatch.setattr(neighbourhoods, "LEADERS", leaders)
    keys = Projected(monkeypatch)
    assert keys.projected
    assert keys.index.nbytes / len(keys) < keys.full / 2
    found_share = []
    for q in keys.matrix[:20]:
        exact = keys.exact(q)
        assert keys.scores(keys.ids[:50], q) == pytest.approx(
            {i: exact[i] for i in keys.ids[:50]}, abs=1e-4)
        found = keys.search(q, 0.2, 10)
        assert [s for _, s in found] == sorted((s for _, s in found), reverse=True)
        assert all(score == pytest.approx(exact[i], abs=1e-4) and score > 0.2
                   for i, score in found)
        best = sorted(exact, key=lambda i: -exact[i])[:10]
        found_share.append(len({i for i, _ in found} & set(best)) / 10)
    assert np.mean(found_share) >= 0.95  # candidates from 16 of 48 coordinates


def test_the_best_among_some_keys_are_their_exact_best_projected_or_whole(
        monkeypatch: pytest.MonkeyPatch) -> None:
    keys = Projected(monkeypatch)
    whole = Neighbourhoods(VectorIndex(48), 0.5)  # the same keys, never projected
    whole.turns.upsert(keys.ids, keys.matrix, fit=False)
    whole.upsert([(i, f"s{n % 30}", n) for n, i in enumerate(keys.ids)])
    assert keys.projected
    assert not whole.projected
    some = keys.ids[::3]
    found_share = []
    for q in keys.matrix[:20]:
        exact = keys.exact(q)
        best = sorted(some, key=lambda i: -exact[i])[:10]
        # Whole keys are stored to within a cosine of 1e-4: near ties may change places.
        assert [s for _, s in whole.best_among(some, q, 10)] == pytest.approx(
            [exact[i] for i in best], abs=1e-3)
        found = keys.best_among(some, q, 10)
        assert all(i in some and score == pytest.approx(exact[i], abs=1e-4)
                   for i, score in found)
        assert [s for _, s in found] == sorted((s for _, s in found), reverse=True)
        found_share.append(len({i for i, _ in found} & set(best)) / 10)
    assert np.mean(found_share) >= 0.95
    assert keys.best_among([], keys.matrix[0], 10) == []
    assert keys.best_among(["unknown"], keys.matrix[0], 10) == []


def test_projected_moments_estimate_the_keys_scores_and_forget_with_them(
        monkeypatch: pytest.MonkeyPatch) -> None:
    keys = Projected(monkeypatch)
    q = keys.matrix[3]
    scores = np.array(list(keys.exact(q).values()))
    mean, spread = keys.moments(q) or (0.0, 0.0)
    assert mean == pytest.approx(scores.mean(), abs=0.01)
    assert spread == pytest.approx(scores.std(), abs=0.01)
    keys.turns.remove(["m7"])
    keys.remove(["m7"])
    assert "m7" not in keys.index
    assert keys.scores(["m7"], q) == {}
    assert keys._sample is None  # no key of a forgotten turn is kept for the moments


def test_the_moments_sample_is_taken_again_as_the_set_grows_not_at_each_turn(
        monkeypatch: pytest.MonkeyPatch) -> None:
    keys = Projected(monkeypatch)
    q = keys.matrix[3]
    keys.moments(q)
    taken = keys._sample

    def add(n: int, start: int) -> None:
        new = keys.matrix[:n]
        fresh = [f"n{start + i}" for i in range(n)]
        keys.turns.upsert(fresh, new, fit=False)
        keys.upsert([(f"n{start + i}", "s0", 10_000 + start + i) for i in range(n)])

    add(1, 0)
    keys.moments(q)
    assert keys._sample is taken  # one turn more: the estimate stands
    add(60, 1)  # past a tenth more
    keys.moments(q)
    assert keys._sample is not taken


@settings(max_examples=200, deadline=None)
@given(st.lists(st.tuples(st.booleans(), st.integers(0, 4), st.sampled_from("abcde")),
                max_size=40))
def test_a_sessions_order_is_that_of_seq_then_id_whatever_the_ties(
    steps: list[tuple[bool, int, str]],
) -> None:
    """A model: the session's (seq, id) pairs, sorted; seqs may tie (ids then decide)."""
    order, model = neighbourhoods._Order("s"), set[tuple[int, str]]()
    for add, seq, message_id in steps:
        if add and (seq, message_id) not in model:
            order.insert(seq, message_id)
            model.add((seq, message_id))
        elif not add and (seq, message_id) in model:
            order.remove(seq, message_id)
            model.discard((seq, message_id))
        expected = sorted(model)
        assert order.ids == [i for _, i in expected]
        assert order.seqs == [s for s, _ in expected]
        for at, (s, i) in enumerate(expected):
            before = expected[at - 1][1] if at > 0 else None
            after = expected[at + 1][1] if at + 1 < len(expected) else None
            assert order.sides(s, i) == (before, after)
