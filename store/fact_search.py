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

import apsw

from store.fact_reads import Fact, list_facts

MIN_PREFIX = 4
"""Shortest shared prefix that counts as a (half) match between two different words."""

_WORD = re.compile(r"[^\W_]+")
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


def relevant_facts(conn: apsw.Connection, query: str | None, limit: int) -> list[FactMatch]:
    """The ``limit`` facts that best match ``query``, best first; none for an empty query."""
    terms = words(query or "")
    if not terms or limit < 1:
        return []
    facts = list_facts(conn)
    documents = [words(f"{f.category} {f.key} {f.value}") for f in facts]
    weights = _weights(terms, documents)
    scored = [
        FactMatch(fact, score)
        for fact, document in zip(facts, documents, strict=True)
        if (score := _score(weights, document)) > 0
    ]
    # Stable sorts, least significant key first: score, then the newest, then the id.
    scored.sort(key=lambda m: m.fact.id)
    scored.sort(key=lambda m: m.fact.updated_at, reverse=True)
    scored.sort(key=lambda m: m.score, reverse=True)
    return scored[:limit]


def words(text: str) -> set[str]:
    """The distinct, case-folded content words of ``text``."""
    found = {w.casefold() for w in _WORD.findall(text)}
    return {w for w in found if w not in _STOPWORDS}


def _match(term: str, document: set[str]) -> float:
    if term in document:
        return 1.0
    if len(term) >= MIN_PREFIX and any(
        len(w) >= MIN_PREFIX and (w.startswith(term) or term.startswith(w)) for w in document
    ):
        return 0.5
    return 0.0


def _weights(terms: set[str], documents: list[set[str]]) -> dict[str, float]:
    count = len(documents)
    weights = {}
    for term in terms:
        frequency = sum(1 for d in documents if _match(term, d) > 0)
        if frequency:
            weights[term] = math.log(1 + count / frequency)
    return weights


def _score(weights: dict[str, float], document: set[str]) -> float:
    return sum(weight * _match(term, document) for term, weight in weights.items())
