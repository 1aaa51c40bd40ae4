"""Contextual keys: a turn mixed with its neighbours in its own session, kept up to date."""

from __future__ import annotations

from collections.abc import Iterable

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

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
