"""bench/folds.py: the held-out conversation never influences the constants used on it."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from bench import folds
from bench.folds import Answer, Scores

CONVERSATIONS = ["a", "b", "c"]


def scores(by_conversation: dict[str, float]) -> Scores:
    return Scores([Answer(c, 4, recall, 0.01, 20) for c, recall in by_conversation.items()])


def test_each_conversation_is_held_out_once_and_never_trained_on() -> None:
    found = folds.splits(CONVERSATIONS)
    assert [held for _, held in found] == CONVERSATIONS
    for training, held in found:
        assert held not in training
        assert sorted([*training, held]) == CONVERSATIONS


def test_the_choice_ignores_the_held_out_conversation() -> None:
    variants = {"fits c": scores({"a": 0.5, "b": 0.5, "c": 1.0}),
                "fits a and b": scores({"a": 0.6, "b": 0.6, "c": 0.0})}
    chosen = {fold.held_out: fold.chosen for fold in folds.folds(variants, CONVERSATIONS)}
    assert chosen["c"] == "fits a and b"
    assert chosen["a"] == "fits c"  # trained on b and c: 0.75 against 0.3


@given(st.lists(st.tuples(st.floats(0, 1), st.floats(0, 1), st.floats(0, 1)),
                min_size=1, max_size=6),
       st.lists(st.floats(0, 1), min_size=6, max_size=6))
def test_changing_the_held_out_answers_never_changes_the_choice(
    rows: list[tuple[float, float, float]], other: list[float]
) -> None:
    variants = {f"v{i}": scores(dict(zip(CONVERSATIONS, row, strict=True)))
                for i, row in enumerate(rows)}
    before = folds.folds(variants, CONVERSATIONS)
    for fold in before:
        changed = {name: Scores([a if a.conversation != fold.held_out
                                 else Answer(a.conversation, 4, other[i], 0.01, 20)
                                 for a in s.answers])
                   for i, (name, s) in enumerate(variants.items())}
        assert folds.choose(changed, fold.training) == fold.chosen


def test_the_grid_names_each_combination_of_the_tuned_constants() -> None:
    variants = folds.grid({"recall_lexical_weight": (0.3, 0.7), "recall_min_z": (0.5,)})
    assert variants == {
        "lexical_weight=0.3 min_z=0.5": {"recall_lexical_weight": 0.3, "recall_min_z": 0.5},
        "lexical_weight=0.7 min_z=0.5": {"recall_lexical_weight": 0.7, "recall_min_z": 0.5},
    }


def test_scores_per_category_and_subset() -> None:
    s = Scores([Answer("a", 1, 1.0, 0.1, 20), Answer("b", 2, 0.0, 0.2, 10)])
    assert s.mean() == 0.5
    assert s.mean(1) == 1.0
    assert s.within({"b"}).mean() == 0.0
    assert s.recall == {1: [1.0], 2: [0.0]}
    assert s.items == [20, 10]
