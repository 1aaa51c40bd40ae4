"""Leave-one-conversation-out: tune on the other conversations, test on the held-out one.

Every variant of the tuned profile (one point of :data:`GRID`) answers every question
once; a fold then chooses, among the variants, the one with the best mean recall over
the questions of its *training* conversations only, and reports that variant's figures
on the held-out conversation. Choosing reads nothing of the held-out conversation, so
its questions never influence the constants used on it (tests/bench/test_folds.py).
"""

from __future__ import annotations

import itertools
from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

GRID_AXES: dict[str, tuple[float, ...]] = {
    "recall_lexical_weight": (0.3, 0.5, 0.7),
    "recall_neighbour_share": (0.5, 0.7, 0.9),
    "recall_feedback": (0.0, 1.0, 2.0),
}
"""The tuned constants and the values tried for each (every other one stays at its
default): few constants, few values, so a fold cannot fit noise."""


def grid(axes: Mapping[str, Sequence[float]] = GRID_AXES) -> dict[str, dict[str, Any]]:
    """Variant name -> the settings it changes, for every combination of ``axes``."""
    names = list(axes)
    variants = {}
    for values in itertools.product(*(axes[n] for n in names)):
        changes = dict(zip(names, values, strict=True))
        variants[" ".join(f"{_short(k)}={v:g}" for k, v in changes.items())] = changes
    return variants


def _short(key: str) -> str:
    return key.removeprefix("recall_")


@dataclass(frozen=True)
class Answer:
    """One question asked of one profile or variant."""

    conversation: str
    category: int
    recall: float
    seconds: float
    items: int


@dataclass
class Scores:
    """One profile's answers, with the figures over any subset of conversations."""

    answers: list[Answer] = field(default_factory=list)

    def add(self, answer: Answer) -> None:
        self.answers.append(answer)

    def within(self, conversations: Collection[str]) -> Scores:
        return Scores([a for a in self.answers if a.conversation in conversations])

    @property
    def recall(self) -> dict[int, list[float]]:
        by_category: dict[int, list[float]] = {}
        for a in self.answers:
            by_category.setdefault(a.category, []).append(a.recall)
        return by_category

    @property
    def latency(self) -> list[float]:
        return [a.seconds for a in self.answers]

    @property
    def items(self) -> list[int]:
        return [a.items for a in self.answers]

    def mean(self, category: int | None = None) -> float:
        values = [a.recall for a in self.answers if category in (None, a.category)]
        return sum(values) / len(values) if values else float("nan")


@dataclass(frozen=True)
class Fold:
    held_out: str
    training: tuple[str, ...]
    chosen: str
    """The variant chosen on the training conversations."""


def splits(conversations: Sequence[str]) -> list[tuple[tuple[str, ...], str]]:
    """(training conversations, held-out conversation), each conversation held out once."""
    return [(tuple(c for c in conversations if c != held), held) for held in conversations]


def choose(variants: Mapping[str, Scores], training: Collection[str]) -> str:
    """The variant with the best mean recall over ``training``'s questions (ties: the
    first in ``variants``' order)."""
    best, best_mean = "", -1.0
    for name, scores in variants.items():
        mean = scores.within(training).mean()
        if mean > best_mean:
            best, best_mean = name, mean
    return best


def folds(variants: Mapping[str, Scores], conversations: Sequence[str]) -> list[Fold]:
    return [Fold(held, training, choose(variants, training))
            for training, held in splits(conversations)]
