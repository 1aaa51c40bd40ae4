"""Sentences and key terms (names, dates, numbers) of conversational text, without a model.

A summary may drop a sentence but should not drop who, when and how many: the
extractive summariser lists the key terms of the sentences it left out. Names are found
the way a reader would without a dictionary: capitalised words inside a sentence, and a
sentence's first word only when it is an acronym or is capitalised elsewhere too (so
"Hey", "Wow" and "Thanks" at the start of a turn are not names).
"""

from __future__ import annotations

import re
from collections.abc import Iterable


def _wordset(text: str) -> frozenset[str]:
    return frozenset(text.split())


_SENTENCE_END = re.compile(r"(?<=[.!?…])\s+|(?<=[.!?…][\"'”’)\]])\s+|\n+")
_ABBREVIATIONS = ("Mr.", "Mrs.", "Ms.", "Dr.", "St.", "Prof.", "e.g.", "i.e.", "vs.", "etc.")
_WORD = re.compile(r"[^\W\d_][\w'’+&-]*")
_POSSESSIVE = re.compile(r"['’]s$")
_CONTRACTION = re.compile(r"['’](?:t|re|ve|ll|d|m)$")

_MONTH = (r"(?:January|February|March|April|June|July|August|September|October|November|"
          r"December|Jan\.?|Feb\.?|Mar\.?|Apr\.?|Jun\.?|Jul\.?|Aug\.?|Sept?\.?|Oct\.?|"
          r"Nov\.?|Dec\.?|May)")
_DAY = r"\d{1,2}(?:st|nd|rd|th)?"
_WEEKDAY = (r"\b(?:(?:[Ll]ast|[Nn]ext|[Tt]his)\s+)?(?:Monday|Tuesday|Wednesday|Thursday|Friday|"
            r"Saturday|Sunday|Mon|Tues?|Wed|Thu(?:rs?)?|Fri)s?\b")
_DATES = re.compile(
    "|".join((
        rf"\b{_DAY}\s+(?:of\s+)?{_MONTH}(?:,?\s+\d{{4}})?\b",  # 25 May, 2023
        rf"\b{_MONTH}\s+{_DAY}(?:,?\s+\d{{4}})?\b",  # May 25th, 2023
        rf"\b{_MONTH}\s+\d{{4}}\b",  # May 2023
        r"\b(?:January|February|March|April|June|July|August|September|October|November|"
        r"December)\b",  # a bare month name, but not "May" (a verb too)
        r"\b\d{4}-\d{2}-\d{2}\b",
        r"\b\d{1,2}/\d{1,2}(?:/\d{2,4})?\b",
        _WEEKDAY,
        r"\b(?:1[89]|20)\d{2}s?\b",  # years
    ))
)
_NUMBER = re.compile(
    r"(?<![\w.])(?P<number>[$€£]?\d+(?:[.,:]\d+)*(?:%|st|nd|rd|th|am|pm|k|K)?)(?![\w])"
    r"(?:\s+(?P<unit>[a-z]{3,}))?"
)

NOT_NAMES = _wordset("""
    I I'm I've I'll I'd I’m I’ve I’ll I’d OK Ok Okay Hey Hi Hello Wow Woah Whoa Yeah Yes Yep
    No Nope Oh Ah Aw Aww Thanks Thank Sorry Good Great Cool Sure Well So And But Or The A An
    It It's It’s That That's That’s This These Those There Here What What's Why How When
    Where Who Which We You He She They My Our Your His Her Their Me Us Let Let's Let’s Lol
    Haha Awesome Nice Congrats Congratulations Please Also Just Maybe Anyway Totally Sounds
    Glad Hope Do Did Does Is Are Was Were Have Has Had If Not Can Could Would Should Will
    Got Gonna Wanna As At In On Of For To With By From Man Dude Bye See Check Look Love
""")
"""Capitalised words that are not names even in the middle of a sentence (after a quote,
a colon, or in a greeting)."""


_FUNCTION_WORDS = _wordset("""
    a about after again all also am an and any are as at be been being but by can could
    did do does doing don't for from get got gonna had has have having he her here hers him
    his how i i'd i'll i'm i've if in into is it it's its just let's like lot me more most
    much my no not now of off oh on one only or our out over own really same she should so
    some such than that that's the their them then there these they this those through to
    too up us very was wanna we were what when where which while who why will with would
    yeah yes you you're your yours wow great good awesome cool thanks thank sounds super
    totally definitely amazing glad hope nice sure well hey hello bye lol haha
    and the but for with that this was are were have has had its our you your his her
    their who which what when where then than from into onto about over under
""")




def content_words(text: str) -> int:
    """How many distinct words of ``text`` carry meaning (not function words or chat fillers)."""
    words = {w.lower().replace("’", "'") for w in _WORD.findall(text)}
    return len({w for w in words if len(w) > 2 and w not in _FUNCTION_WORDS})


def split_sentences(text: str) -> list[str]:
    """Sentences of ``text`` (line breaks end a sentence too), stripped, none empty."""
    pieces = [p.strip() for p in _SENTENCE_END.split(text) if p and p.strip()]
    merged: list[str] = []
    for piece in pieces:
        if merged and merged[-1].endswith(_ABBREVIATIONS):
            merged[-1] = f"{merged[-1]} {piece}"
        else:
            merged.append(piece)
    return merged


def key_terms(sentences: Iterable[str]) -> list[str]:
    """Names, dates and numbers of ``sentences``, each once, in order of first mention."""
    sentences = list(sentences)
    vocabulary = _Vocabulary(sentences)
    seen: dict[str, None] = {}
    for sentence in sentences:
        for term in _terms_of(sentence, vocabulary):
            seen.setdefault(term, None)
    return list(seen)


class _Vocabulary:
    """The words a text capitalises mid-sentence, to judge a sentence's first word."""

    def __init__(self, sentences: list[str]) -> None:
        self.inner: set[str] = set()  # capitalised somewhere other than a sentence start
        for sentence in sentences:
            for index, match in enumerate(_WORD.finditer(sentence)):
                word = _POSSESSIVE.sub("", match.group(0))
                if index and word[0].isupper() and word not in NOT_NAMES:
                    self.inner.add(word)

    def opens_with_name(self, word: str, possessive: bool) -> bool:
        """A capitalised first word is a name when the text says so: it is capitalised
        mid-sentence too, an acronym, or a possessive ("Maria's"). Otherwise it is taken
        for an ordinary word ("Growing up", "Appreciate it"): without a dictionary, a name
        mentioned once and only at the start of a sentence is missed, which costs less
        than listing every sentence opener as a name."""
        return word in self.inner or _is_acronym(word) or possessive


def _terms_of(sentence: str, vocabulary: _Vocabulary) -> list[str]:
    """The terms of one sentence in order of position: dates, numbers, then names."""
    found: list[tuple[int, str]] = []
    taken: list[tuple[int, int]] = []
    for match in _DATES.finditer(sentence):
        found.append((match.start(), match.group(0)))
        taken.append(match.span())
    for match in _NUMBER.finditer(sentence):
        if any(a <= match.start() < b for a, b in taken):
            continue
        unit = match.group("unit")
        text = match.group("number")
        if unit and unit not in _FUNCTION_WORDS:
            text = f"{text} {unit}"  # "3 kids" says more than "3"
        found.append((match.start(), text))
        taken.append(match.span())
    for start, name in _names(sentence, vocabulary):
        if not any(a <= start < b for a, b in taken):
            found.append((start, name))
    return [term for _, term in sorted(found)]


def _names(sentence: str, vocabulary: _Vocabulary) -> list[tuple[int, str]]:
    """Runs of capitalised words: ``Door Dash``, ``Caroline``, ``LGBTQ+``."""
    matches = list(_WORD.finditer(sentence))
    capitalised = [_capitalised(m) for m in matches]
    if capitalised and capitalised[0]:
        word = _POSSESSIVE.sub("", matches[0].group(0))
        capitalised[0] = vocabulary.opens_with_name(word, word != matches[0].group(0))
    runs: list[list[re.Match[str]]] = []
    for match, is_name in zip(matches, capitalised, strict=True):
        if not is_name:
            continue
        previous = runs[-1][-1] if runs else None
        joins = (previous is not None and previous.end() <= match.start()
                 and not _gap(sentence, previous, match)
                 and not _POSSESSIVE.search(previous.group(0))  # "Maria's dog": ends there
                 and matches.index(previous) == matches.index(match) - 1)
        if joins:
            runs[-1].append(match)
        else:
            runs.append([match])
    return [_joined(run) for run in runs]


def _capitalised(match: re.Match[str]) -> bool:
    word = _POSSESSIVE.sub("", match.group(0))
    return word[0].isupper() and word not in NOT_NAMES and not _CONTRACTION.search(word)


def _gap(sentence: str, left: re.Match[str], right: re.Match[str]) -> bool:
    """Punctuation between two words: they are two names, not one."""
    return bool(sentence[left.end():right.start()].strip())


def _joined(run: list[re.Match[str]]) -> tuple[int, str]:
    words = [_POSSESSIVE.sub("", m.group(0)).rstrip(".-'’") for m in run]
    return run[0].start(), " ".join(words)


def _is_acronym(word: str) -> bool:
    letters = [c for c in word if c.isalpha()]
    return len(letters) >= 2 and all(c.isupper() for c in letters)
