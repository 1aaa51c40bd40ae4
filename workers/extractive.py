"""The built-in summariser: the most central sentences of a chunk, plus its key terms.

No network and no generation, so nothing is made up: every sentence of the summary is a
sentence of the conversation, with who said it (and on which day, when the chunk spans
several). Sentences are embedded with the same local model as the messages; a sentence's
score is its cosine with the chunk's centroid, plus a little for each name, date or
number it holds; they are then picked by maximal marginal relevance (so the summary does
not say the same thing twice) until the character budget (``target_ratio`` of the
sources) is spent. Names, dates and numbers of the sentences left out follow on one
"Also mentioned:" line, so who, when and how many survive the cut; they come first, and
may stretch the text up to half of the sources when the budget cannot hold them.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from memq.config import EmbedConfig
from memq.embedding import Embedder
from memq.workers.keyterms import content_words, key_terms, split_sentences
from memq.workers.summarise import ChunkMessage, Summary, stamp

MIN_BUDGET = 80
"""Characters a summary text may always use, however small its chunk."""

RELEVANCE_WEIGHT = 0.7
"""MMR's balance: 1.0 picks by centrality alone, lower values favour variety."""

TERM_BONUS = 0.05
"""Score added per name, date or number in a sentence (up to three)."""

CONTENT_WORDS = 8
"""Meaningful words at which a sentence counts as fully substantial."""

TERMS_CEILING = 0.5
"""Share of the sources the text may reach to keep every name, date and number."""


@dataclass(frozen=True)
class _Sentence:
    message: int
    text: str
    terms: int
    words: int


class ExtractiveSummariser:
    name = "extractive"

    def __init__(
        self, embed: EmbedConfig | None = None, *, target_ratio: float = 0.3,
        embedder: Embedder | None = None,
    ) -> None:
        self.embedder = embedder or Embedder(embed)
        self.target_ratio = target_ratio

    def summarise(self, messages: Sequence[ChunkMessage]) -> Summary:
        sentences = _candidates(messages)
        if not sentences:
            return Summary("")
        chars_in = sum(len(m.content) for m in messages)
        budget = max(MIN_BUDGET, int(self.target_ratio * chars_in))
        terms = key_terms(s.text for s in _all_sentences(messages))
        layout = _Layout(messages)
        chosen = self._select(_Selection(sentences, layout, terms, budget))
        body = "\n".join(layout.render(sentences, chosen, budget))
        # Names, dates and numbers come before sentences: when the budget cannot hold them
        # all, they may take up to TERMS_CEILING of the sources.
        room = max(budget, int(TERMS_CEILING * chars_in)) - len(body) - 1
        extra = _terms_line([t for t in terms if t not in body], room)
        return Summary(f"{body}\n{extra}" if extra else body)

    def _select(self, selection: _Selection) -> list[int]:
        sentences = selection.sentences
        vectors = self.embedder.embed([s.text for s in sentences])
        centroid = vectors.mean(axis=0)
        centroid /= max(float(np.linalg.norm(centroid)), 1e-12)
        bonus = np.array([TERM_BONUS * min(s.terms, 3) for s in sentences], dtype=np.float32)
        substance = np.array([0.5 + 0.5 * min(s.words, CONTENT_WORDS) / CONTENT_WORDS
                              for s in sentences], dtype=np.float32)
        # Chat is full of central but empty turns ("That's great!"): weigh by substance.
        scores = (vectors @ centroid) * substance + bonus
        redundancy = np.zeros(len(sentences), dtype=np.float32)
        while True:
            mmr = RELEVANCE_WEIGHT * scores - (1 - RELEVANCE_WEIGHT) * redundancy
            pick = selection.add_first_fitting(np.argsort(-mmr, kind="stable"))
            if pick is None:
                break
            redundancy = np.maximum(redundancy, vectors @ vectors[pick])
        return selection.chosen or [int(np.argmax(scores))]


class _Selection:
    """The sentences picked so far, and the key terms they leave for the closing line.

    A sentence fits when the sentences picked, it, and the line listing the terms still
    uncovered all fit in the budget: a sentence that names things shortens that line.
    """

    def __init__(self, sentences: list[_Sentence], layout: _Layout, terms: list[str],
                 budget: int) -> None:
        self.sentences, self.layout, self.terms, self.budget = sentences, layout, terms, budget
        self.covers = [frozenset(j for j, t in enumerate(terms) if t in s.text)
                       for s in sentences]
        self.uncovered = frozenset(range(len(terms)))
        self.chosen: list[int] = []
        self.used = 0

    def add_first_fitting(self, order: np.ndarray) -> int | None:
        """Add the best-ranked sentence that fits; None when none does."""
        for index in map(int, order):
            if index in self.chosen:
                continue
            cost = self.layout.cost(self.sentences[index], self.chosen, self.sentences)
            left = self.uncovered - self.covers[index]
            if self.used + cost + self._line_length(left) <= self.budget:
                self.chosen.append(index)
                self.used += cost
                self.uncovered = left
                return index
        return None

    def _line_length(self, uncovered: frozenset[int]) -> int:
        return len(_terms_line([self.terms[j] for j in sorted(uncovered)]))


class _Layout:
    """How chosen sentences become lines: ``[date] role: sentence sentence``."""

    def __init__(self, messages: Sequence[ChunkMessage]) -> None:
        self.messages = messages
        self.days = [stamp(m)[:10] for m in messages]
        self.dated = len(set(self.days)) > 1  # one day: the header already says which

    def prefix(self, message: int) -> str:
        role = f"{self.messages[message].role}: "
        return f"[{self.days[message]}] {role}" if self.dated else role

    def cost(self, sentence: _Sentence, chosen: list[int], sentences: list[_Sentence]) -> int:
        opened = any(sentences[i].message == sentence.message for i in chosen)
        return len(sentence.text) + 1 + (0 if opened else len(self.prefix(sentence.message)))

    def render(self, sentences: list[_Sentence], chosen: list[int], budget: int) -> list[str]:
        by_message: dict[int, list[str]] = {}
        for index in sorted(chosen, key=lambda i: (sentences[i].message, i)):
            by_message.setdefault(sentences[index].message, []).append(sentences[index].text)
        lines = [self.prefix(m) + " ".join(texts) for m, texts in sorted(by_message.items())]
        if len(lines) == 1 and len(lines[0]) > budget:  # one sentence longer than the budget
            lines[0] = _truncate(lines[0], budget)
        return lines


def _all_sentences(messages: Sequence[ChunkMessage]) -> list[_Sentence]:
    return [
        _Sentence(i, text, len(key_terms([text])), content_words(text))
        for i, message in enumerate(messages)
        for text in split_sentences(message.content)
    ]


def candidate_sentences(messages: Sequence[ChunkMessage]) -> list[str]:
    """The sentences the summariser embeds for ``messages`` (the benchmark's baseline)."""
    return [s.text for s in _candidates(messages)]


def _candidates(messages: Sequence[ChunkMessage]) -> list[_Sentence]:
    """Sentences worth picking: each text once, and with two meaningful words or more when
    there are any ("Wow!", "Sounds great, Jon!" carry nothing a summary needs)."""
    unique: dict[str, _Sentence] = {}
    for sentence in _all_sentences(messages):
        unique.setdefault(sentence.text, sentence)
    sentences = list(unique.values())
    substantial = [s for s in sentences if s.words >= 2]
    return substantial or sentences


def _terms_line(terms: list[str], room: int | None = None) -> str:
    """``Also mentioned: a, b, c.`` with as many terms as fit in ``room`` characters."""
    label = "Also mentioned: "
    kept: list[str] = []
    size = len(label) - 1  # the first term has no ", " before it, and the line ends in "."
    for term in terms:
        if room is not None and size + len(term) + 2 > room:
            break
        kept.append(term)
        size += len(term) + 2
    return f"{label}{', '.join(kept)}." if kept else ""


def _truncate(text: str, limit: int) -> str:
    cut = text[: max(limit - 1, 1)].rsplit(" ", 1)[0]
    return f"{cut}…"
