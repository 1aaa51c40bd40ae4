"""Facts relevant to a query, for ``get_context`` (lexical, no embeddings).

Facts are short and few (hundreds, a few thousand), so every fact is scored in Python:
each query word found in a fact's category, key or value adds its inverse document
frequency (a word every fact has counts little); a word that only shares a prefix of at
least four letters with one of the fact's words ("prefer" / "preferences") counts half.
Common English words are ignored. Ties go to the most recently updated fact.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass
from typing import Any

import apsw

from memq.store.read.facts import FACT_COLUMNS, VISIBLE_TO, Fact, visible_to
from memq.store.read.lexical import WORD

MIN_PREFIX = 4
"""Shortest shared prefix that counts as a (half) match between two different words."""

_STOPWORDS = frozenset(
    re.split(
        r"\s+",
        "a an and are as at be been but by can could did do does for from had has have he her "
        "his how i if in into is it its me my no not of on or our she so than that the their "
        "them then there these they this to us was we were what when where which who why will "
        "with would you your",
    )
)


@dataclass(frozen=True)
class FactMatch:
    fact: Fact
    score: float


def relevant_facts(
    conn: apsw.Connection, query: str | None, limit: int, user_id: str | None = None
) -> list[FactMatch]:
    """The ``limit`` facts that best match ``query``, best first, among the global facts
    and ``user_id``'s (never another user's); none for an empty query."""
    terms = words(query or "")
    if not terms or limit < 1:
        return []
    rows: list[tuple[Any, ...]] = conn.execute(
        "SELECT id, updated_at, category || ' ' || key || ' ' || value FROM facts "
        f"WHERE {VISIBLE_TO}", visible_to(user_id),
    ).fetchall()
    scores = _scores(terms, [text for _, _, text in rows])
    # Best score first, then the most recently updated, then the oldest id (stable sorts).
    ranked = sorted(scores, key=lambda p: rows[p][0])
    ranked.sort(key=lambda p: rows[p][1], reverse=True)
    ranked.sort(key=lambda p: scores[p], reverse=True)
    chosen = ranked[:limit]
    facts = {f.id: f for f in _facts(conn, [rows[p][0] for p in chosen])}
    return [FactMatch(facts[rows[p][0]], scores[p]) for p in chosen]


def _scores(terms: set[str], texts: list[str]) -> dict[int, float]:
    """Position of each matching text -> its score."""
    index: dict[str, list[int]] = {}  # word -> positions of the texts that have it
    for position, text in enumerate(texts):
        for word in words(text):
            index.setdefault(word, []).append(position)
    scores: dict[int, float] = {}
    for term in terms:
        matches = _matches(term, index)
        weight = math.log(1 + len(texts) / len(matches)) if matches else 0.0
        for position, strength in matches.items():
            scores[position] = scores.get(position, 0.0) + weight * strength
    return scores


def words(text: str) -> set[str]:
    """The distinct, case-folded content words of ``text``."""
    found = {w.casefold() for w in WORD.findall(text)}
    return {w for w in found if w not in _STOPWORDS}


def _matches(term: str, index: dict[str, list[int]]) -> dict[int, float]:
    """Positions of the facts matching ``term``: 1.0 for the word itself, 0.5 for a prefix."""
    found: dict[int, float] = {}
    if len(term) >= MIN_PREFIX:
        for word, positions in index.items():
            if len(word) >= MIN_PREFIX and (word.startswith(term) or term.startswith(word)):
                found.update(dict.fromkeys(positions, 0.5))
    found.update(dict.fromkeys(index.get(term, ()), 1.0))
    return found


def _facts(conn: apsw.Connection, ids: list[object]) -> list[Fact]:
    marks = ", ".join("?" * len(ids))
    rows = conn.execute(f"SELECT {FACT_COLUMNS} FROM facts WHERE id IN ({marks})", ids)
    return [Fact(*row) for row in rows]
