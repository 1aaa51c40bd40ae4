"""The pruned vector index returns exactly what a brute-force scan of what it stores returns;
what it stores is the given vectors within a cosine of 0.9999."""

from __future__ import annotations

import warnings

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from memq.store.read import vector_index
from memq.store.read.vector_index import (
    BLOCK_EDGES,
    FIT_MIN_ROWS,
    VectorIndex,
    _best_first,
    _leading,
    principal_axes,
)

DIM = 384


def unit(rows: np.ndarray) -> np.ndarray:
    return (rows / np.linalg.norm(rows, axis=1, keepdims=True)).astype(np.float32)


def clustered(n: int, seed: int = 0) -> np.ndarray:
    """Unit vectors with most energy in a few directions, like sentence embeddings."""
    rng = np.random.default_rng(seed)
    basis = rng.standard_normal((24, DIM))
    return unit(rng.standard_normal((n, 24)) @ basis + 0.15 * rng.standard_normal((n, DIM)))


def brute(ids: list[str], matrix: np.ndarray, q: np.ndarray, threshold: float,
          limit: int) -> list[str]:
    scores = matrix.astype(np.float64) @ q.astype(np.float64)
    passing = [(s, i) for i, s in zip(ids, scores, strict=True) if s > threshold]
    return [i for s, i in sorted(passing, key=lambda p: -p[0])[:limit]]


def build(matrix: np.ndarray, edges: tuple[int, ...] = BLOCK_EDGES
          ) -> tuple[VectorIndex, list[str]]:
    ids = [f"m{i}" for i in range(len(matrix))]
    index = VectorIndex(DIM, edges=edges)
    index.upsert(ids, matrix)
    return index, ids


@pytest.mark.parametrize("edges", [BLOCK_EDGES, (), (8,), (200, 300, 383), (0, 384, 999)])
@pytest.mark.parametrize("n", [50, FIT_MIN_ROWS + 500])
def test_search_equals_brute_force(n: int, edges: tuple[int, ...]) -> None:
    matrix = clustered(n)
    index, ids = build(matrix, edges)
    assert index.rotated == (n >= FIT_MIN_ROWS)
    rng = np.random.default_rng(1)
    queries = [unit(matrix[i : i + 1] + 0.3 * rng.standard_normal((1, DIM)))[0]
               for i in rng.choice(n, 8)]
    for q in queries:
        for threshold, limit in [(0.65, 5), (0.3, 50), (0.9, 3), (-1.0, 10)]:
            found = index.search(q, threshold, limit)
            expected = brute(ids, index.vectors(ids), q, threshold, limit)
            assert [i for i, _ in found] == expected
            assert all(type(s) is float and s > threshold for _, s in found)


def test_pruning_reads_the_last_block_of_few_rows_on_clustered_data() -> None:
    matrix = clustered(FIT_MIN_ROWS * 2)
    index, _ = build(matrix)
    index.search(matrix[7], 0.65, 5)
    assert index.last_candidates < len(matrix) // 10


def test_a_low_threshold_reads_the_last_block_only_for_rows_that_may_make_the_top() -> None:
    """The best ``limit`` rows bound the search, not the threshold alone: asking for the
    best 5 of everything (threshold -1) must not read every row's last block."""
    matrix = clustered(FIT_MIN_ROWS * 2)
    index, ids = build(matrix)
    found = index.search(matrix[7], -1.0, 5)
    assert [i for i, _ in found] == brute(ids, index.vectors(ids), matrix[7], -1.0, 5)
    assert index.last_candidates < len(matrix) // 10


def test_scores_are_dot_products_in_any_basis() -> None:
    matrix = clustered(FIT_MIN_ROWS)
    index, _ids = build(matrix)
    assert index.rotated
    got = index.scores(["m3", "m10", "absent"], matrix[3])
    assert set(got) == {"m3", "m10"}
    stored = index.vectors(["m3", "m10"]).astype(np.float64)
    assert got["m3"] == pytest.approx(float(stored[0] @ matrix[3]), abs=1e-5)
    assert got["m10"] == pytest.approx(float(stored[1] @ matrix[3]), abs=1e-5)
    assert got["m3"] == pytest.approx(1.0, abs=1e-3)


@pytest.mark.parametrize("n", [50, FIT_MIN_ROWS + 10])
def test_the_stored_vectors_come_back_as_given_in_any_basis(n: int) -> None:
    matrix = clustered(n)
    index, _ids = build(matrix)
    assert index.rotated == (n >= FIT_MIN_ROWS)
    got = index.vectors(["m7", "absent", "m2", "m7"])
    np.testing.assert_allclose(got, matrix[[7, 2, 7]], atol=5e-3)
    index.remove(["m2"])
    np.testing.assert_allclose(index.vectors(["m2", f"m{n - 1}"]), matrix[[n - 1]], atol=5e-3)
    assert index.vectors([]).shape == (0, DIM)


def test_a_fit_in_chunks_turns_every_row(monkeypatch: pytest.MonkeyPatch) -> None:
    """Fitted a chunk of rows at a time, twice (the second from rows already turned and
    quantized), each row is still the vector it was given, and a search finds the same."""
    monkeypatch.setattr(vector_index, "FIT_CHUNK", 1000)
    monkeypatch.setattr(vector_index, "REFIT_GROWTH", 1.2)
    matrix = clustered(FIT_MIN_ROWS * 3 // 2, seed=7)
    cut = FIT_MIN_ROWS + 3
    index, ids = build(matrix[:cut])
    first = index.basis
    index.upsert([f"m{i}" for i in range(cut, len(matrix))], matrix[cut:])
    assert first is not None
    assert index.basis is not first  # fitted again
    np.testing.assert_allclose(index.vectors(ids), matrix[:cut], atol=5e-3)
    every = [f"m{i}" for i in range(len(matrix))]
    for q in matrix[[5, 2500, cut + 17]]:
        assert ([i for i, _ in index.search(q, 0.3, 20)]
                == brute(every, index.vectors(every), q, 0.3, 20))


@pytest.mark.parametrize("n", [50, FIT_MIN_ROWS + 10])
def test_what_is_stored_is_within_a_cosine_of_0_9999_in_a_third_of_the_memory(n: int) -> None:
    matrix = clustered(n, seed=3)
    index, ids = build(matrix)
    stored = index.vectors(ids).astype(np.float64)
    cosines = (stored * matrix).sum(axis=1) / np.linalg.norm(stored, axis=1)
    assert cosines.min() > 0.9999
    assert index.nbytes / len(index._blocks[0]) < DIM * 4 / 3  # float32 would be 1,536 a row


@pytest.mark.parametrize("n", [50, FIT_MIN_ROWS + 10])
def test_a_stored_unit_vector_stays_one_and_its_score_with_itself_is_1(n: int) -> None:
    matrix = clustered(n, seed=5)
    index, ids = build(matrix)
    np.testing.assert_allclose(np.linalg.norm(index.vectors(ids), axis=1), 1.0, atol=1e-5)
    selves = [index.scores([i], matrix[k])[i] for k, i in enumerate(ids[:50])]
    assert max(selves) <= 1.0 + 1e-5
    assert min(selves) > 0.9999


def test_a_block_of_vanishing_coordinates_is_stored_as_zeros_without_a_division_by_zero(
) -> None:
    """A vector with coordinates past the first block too small for their int8 scale to
    be a float32 (a crafted embedding) is stored, and searched, as if they were zeros."""
    matrix = clustered(20)
    tiny = np.zeros(DIM, dtype=np.float32)
    tiny[0], tiny[40:] = 1.0, np.float32(1e-44)
    index = VectorIndex(DIM)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        index.upsert([*(f"m{i}" for i in range(20)), "tiny"], np.vstack([matrix, tiny]))
        found = index.search(matrix[3], 0.3, 5)
    assert found[0][0] == "m3"
    np.testing.assert_array_equal(index.vectors(["tiny"])[0, 32:], 0.0)
    assert index.scores(["tiny"], tiny)["tiny"] == pytest.approx(1.0)


def test_a_removed_vector_leaves_nothing_in_the_spare_rows() -> None:
    matrix = clustered(30, seed=8)
    index, ids = build(matrix)
    index.remove([ids[-1], ids[3]])  # the last row, and one whose hole the last fills
    for array in index._arrays():
        assert not np.any(array[len(index):len(ids)])


def recovered(axes: np.ndarray, others: np.ndarray) -> np.ndarray:
    """An attack on axes fitted on every row: with the other rows known, the axes give
    away the one missing. In the exact axes E of G + v v', E'(G + v v')E is diagonal, so
    the off-diagonal part of E'GE is -w w', w = E'v; its leading eigenvector gives w."""
    rank_one = -(axes.T @ (others.T.astype(np.float64) @ others) @ axes)
    np.fill_diagonal(rank_one, 0.0)
    for _ in range(100):  # the diagonal of w w' is unknown: estimated, again and again
        values, vectors = np.linalg.eigh(rank_one)
        w = vectors[:, -1] * np.sqrt(max(values[-1], 0.0))
        np.fill_diagonal(rank_one, w**2)
    guess = axes @ w
    return np.asarray(guess / max(float(np.linalg.norm(guess)), 1e-12))


def anisotropic(rows: int, dim: int, seed: int) -> np.ndarray:
    raw = np.random.default_rng(seed).standard_normal((rows, dim)) * np.geomspace(4, 0.2, dim)
    return raw / np.linalg.norm(raw, axis=1, keepdims=True)


def test_the_principal_axes_give_away_no_row_and_keep_the_leading_energy() -> None:
    sample = anisotropic(2000, 64, seed=5)
    secret, others = sample[17], np.delete(sample, 17, axis=0)
    exact = principal_axes(sample, noise=0.0)
    assert abs(float(recovered(exact, others) @ secret)) > 0.99  # the attack works...
    for seed in range(5):
        noisy = principal_axes(sample, rng=np.random.default_rng(seed))
        assert abs(float(recovered(noisy, others) @ secret)) < 0.4  # ... not through noise
        # what a search and a projection use: the energy along the leading axes
        for kept in (8, 16, 32):
            along = np.sum((sample @ noisy[:, :kept]) ** 2)
            assert along >= 0.99 * np.sum((sample @ exact[:, :kept]) ** 2)


def test_an_index_is_rotated_into_noisy_axes(monkeypatch: pytest.MonkeyPatch) -> None:
    """What the index keeps is fitted through :func:`principal_axes` and its noise: its
    axes do not make its rows' Gram matrix diagonal, which exact ones would."""
    from memq.store.read import vector_index

    matrix = anisotropic(FIT_MIN_ROWS, 64, seed=6).astype(np.float32)

    def off_diagonal(noise: float) -> tuple[float, float]:
        monkeypatch.setattr(vector_index, "AXES_NOISE", noise)
        index = VectorIndex(64, edges=())  # one float32 block: the rows kept exactly
        index.upsert([f"m{i}" for i in range(len(matrix))], matrix)
        assert index.basis is not None
        axes = index.basis.astype(np.float64)
        spread = axes.T @ (matrix.T.astype(np.float64) @ matrix) @ axes
        guess = recovered(axes, np.delete(matrix, 17, axis=0))
        off = spread - np.diag(np.diag(spread))
        return float(np.linalg.norm(off)), abs(float(guess @ matrix[17]))

    default = vector_index.AXES_NOISE
    exact, found = off_diagonal(0.0)
    assert exact < 1e-3  # float32 rounding
    assert found > 0.99  # without the noise, the index's own axes give the row away
    noisy, _ = off_diagonal(default)
    assert noisy > 1.0


@pytest.mark.parametrize("n", [50, FIT_MIN_ROWS + 500])
def test_the_best_among_some_ids_are_their_brute_force_best(n: int) -> None:
    matrix = clustered(n)
    index, ids = build(matrix)
    some = [*ids[::7], "unknown"]
    for q in matrix[:5]:
        found = index.best_among(some, q, 12)
        assert [i for i, _ in found] == brute(ids[::7], index.vectors(ids[::7]), q, -2.0, 12)
        assert index.best_among(some, q, 0) == []


def test_threshold_is_strict() -> None:
    matrix = clustered(20)
    index, _ = build(matrix)
    score = index.scores(["m4"], matrix[0])["m4"]
    assert "m4" not in [i for i, _ in index.search(matrix[0], score, 20)]
    below = float(np.nextafter(score, -2.0))
    assert "m4" in [i for i, _ in index.search(matrix[0], below, 20)]


def test_upsert_replaces_and_remove_keeps_the_rest_searchable() -> None:
    matrix = clustered(FIT_MIN_ROWS + 10)
    index, ids = build(matrix)
    index.upsert(["m0"], matrix[1:2])  # m0 now points where m1 does
    assert index.scores(["m0"], matrix[1])["m0"] == pytest.approx(1.0, abs=1e-3)
    assert index.remove(["m1", "m2", "nope"]) == 2
    assert len(index) == len(ids) - 2
    assert "m1" not in index
    last = ids[-1]  # moved into a freed row
    assert index.search(matrix[-1], 0.99, 1)[0][0] == last
    rest = [i for i in ids if i not in ("m1", "m2")]
    kept = index.vectors(rest)
    q = matrix[5]
    assert [i for i, _ in index.search(q, 0.5, 10)] == brute(rest, kept, q, 0.5, 10)


def test_an_id_given_twice_in_one_upsert_keeps_the_last_vector() -> None:
    matrix = clustered(3)
    index = VectorIndex(DIM)
    index.upsert(["a", "b", "a"], matrix)
    assert len(index) == 2
    assert index.scores(["a"], matrix[2])["a"] == pytest.approx(1.0, abs=1e-3)


def test_empty_index_and_zero_limit_find_nothing() -> None:
    index = VectorIndex(DIM)
    q = clustered(1)[0]
    assert index.search(q, -1.0, 5) == []
    index.upsert(["a"], q[None, :])
    assert index.search(q, -1.0, 0) == []
    assert index.scores([], q) == {}


def test_dimension_must_be_positive() -> None:
    with pytest.raises(ValueError, match="dim must be at least 1"):
        VectorIndex(0)


@pytest.mark.parametrize("n", [50, FIT_MIN_ROWS + 500])
def test_the_leaders_are_the_best_of_the_rows_leading_on_the_first_block(n: int) -> None:
    """An approximate search: the best ``limit``, by their whole score, of the ``pool``
    rows whose first block scores highest; every row while the set holds no more."""
    matrix = clustered(n)
    index, ids = build(matrix)
    stored, rng = index.stored(ids).astype(np.float64), np.random.default_rng(2)
    first = index.cuts[1]
    for i in rng.choice(n, 8):
        q = unit(matrix[i : i + 1] + 0.3 * rng.standard_normal((1, DIM)))[0]
        turned = index.turned(q).astype(np.float64)
        lead = np.argsort(-(stored[:, :first] @ turned[:first]), kind="stable")[:40]
        whole = stored @ turned
        best = sorted(lead, key=lambda row: -whole[row])[:10]
        assert index.leaders(q, 10, 40) == [ids[row] for row in best]
    assert index.leaders(matrix[0], 10, n) == [i for i, _ in index.search(matrix[0], -1.0, 10)]
    assert index.leaders(matrix[0], 0, 40) == []


@given(st.lists(st.sampled_from([-1.0, 0.0, 0.25, 0.5, 1.0]) | st.floats(-1, 1, width=32),
                max_size=300),
       st.integers(0, 320))
def test_the_best_first_are_what_a_stable_sort_begins_with(values: list[float],
                                                            limit: int) -> None:
    """Ties (common among few distinct scores) keep their positions' order, so a search
    returns the same leaders whichever way they are picked."""
    scores = np.array(values, dtype=np.float32)
    expected = np.argsort(-scores, kind="stable")[:limit]
    assert _best_first(scores, limit).tolist() == expected.tolist()


@given(st.lists(st.sampled_from([-1.0, 0.0, 0.25, 0.5]) | st.floats(-1, 1, width=32),
                min_size=1, max_size=3000),
       st.data())
def test_the_leading_rows_are_the_largest_scores_in_stored_order(values: list[float],
                                                                 data: st.DataObject) -> None:
    """Whether the sampled cut keeps enough or not: what a stable sort of the scores,
    best first, begins with (of those tied at the edge, the first), by increasing
    position."""
    scores = np.array(values, dtype=np.float32)
    pool = data.draw(st.integers(1, len(scores)))
    rows = _leading(scores, pool)
    assert rows.tolist() == sorted(np.argsort(-scores, kind="stable")[:pool].tolist())
