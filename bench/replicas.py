"""One user's long history made of LoCoMo conversations: copies with renamed speakers.

A user of an agent platform accumulates years of conversations that look alike: the same
kinds of talk between different people. To measure retrieval at 100,000 or 1,000,000 turns
on real text (not sentence mixes), each conversation is copied with its two speakers
renamed (every whole-word occurrence of their names, in the ``"<speaker>: "`` prefix and
in the text) and its dates shifted into the past, ``k`` x :data:`SHIFT` for its ``k``-th
copy: copies overlap in time as a user's conversations with many people do, and the
originals stay the user's most recent conversations and keep their questions.
Every copy is a look-alike distractor for those questions: same topics, other people.

Names come from :data:`NAMES` in pairs; the ``n``-th copy made takes pair ``n`` modulo
:data:`PAIRS` (so beyond that many copies, texts repeat with other dates).
Nicknames in the text ("Mel" for Melanie) are not renamed.
"""

from __future__ import annotations

import itertools
import re
from collections.abc import Callable, Iterator, Sequence
from dataclasses import replace
from datetime import timedelta

from bench.locomo import Conversation, Turn

_NAMES = (
    "Alice Bruno Chiara Dmitri Elena Farid Greta Hiro Ines Jonas Keiko Lars Mira Nadia "
    "Oscar Priya Quentin Rosa Sven Tamar Umar Vera Wen Ximena Yusuf Zoe Anders Bianca "
    "Cyrus Dalia Emil Fatima Goran Hana Igor Julia Kofi Lena Mateo Noor Olga Pavel Rania "
    "Sanjay Talia Ugo Valeria Wiktor Yara Zeno Amara Boris Celine Diego Esra Felix Gita "
    "Hugo Ilse Jamal Kira Luca Maren Nils Ona Pedro Ruth Stefan Tess Viktor Wanda Xander "
    "Yasmin Zara Arjun Beatriz Cormac Dana Eitan Freya Gideon Halima Ivo Jana Kenji Lotte "
    "Milo Nia Otto Paula Rafael Signe Tomas Una Vince Willa Yann Zelda"
)
NAMES = tuple(_NAMES.split())

PAIRS = len(NAMES) * (len(NAMES) - 1)
"""How many distinct (speaker a, speaker b) pairs there are."""

SHIFT = timedelta(days=3)
"""How much earlier each copy is than the one before (1,000,000 turns reach ~6 years)."""


def speakers(conversation: Conversation) -> tuple[str, str]:
    """The two speakers' names, read from the ``"<speaker>: "`` prefix of the turns."""
    names = list(dict.fromkeys(t.content.split(":", 1)[0] for t in conversation.turns))
    if len(names) != 2:
        raise ValueError(f"{conversation.session_id}: expected two speakers, got {names}")
    return names[0], names[1]


def pair(k: int) -> tuple[str, str]:
    """The ``k``-th pair of distinct names (k >= 0)."""
    k %= PAIRS
    first, offset = divmod(k, len(NAMES) - 1)
    return NAMES[first], NAMES[(first + 1 + offset) % len(NAMES)]


def renamed(conversation: Conversation, k: int, new: tuple[str, str], shift: timedelta
            ) -> Conversation:
    """Copy ``k`` of ``conversation``: its speakers renamed to ``new``, every date ``shift``
    earlier, the session id suffixed with ``~k``; no questions."""
    rename = _renaming(speakers(conversation), new)
    turns = [replace(t, content=rename(t.content), created_at=t.created_at - shift)
             for t in conversation.turns]
    return Conversation(f"{conversation.session_id}~{k}", turns, [])


ALIKE = ("Avery", "Rowan")
"""The two names every conversation's speakers take in the haystack setting (neither is
said in the development conversations)."""


def alike(conversations: Sequence[Conversation], names: tuple[str, str] = ALIKE
          ) -> list[Conversation]:
    """The conversations with their speakers renamed to the same two ``names``, in the
    turns and in the questions (ids, dates and evidence unchanged): which conversation a
    question is about can no longer be told by who is named."""
    out = []
    for conversation in conversations:
        rename = _renaming(speakers(conversation), names)
        turns = [replace(t, content=rename(t.content)) for t in conversation.turns]
        questions = [replace(q, text=rename(q.text)) for q in conversation.questions]
        out.append(Conversation(conversation.session_id, turns, questions))
    return out


def _renaming(old: tuple[str, str], new: tuple[str, str]) -> Callable[[str], str]:
    pattern = re.compile(rf"\b({re.escape(old[0])}|{re.escape(old[1])})\b")
    names = dict(zip(old, new, strict=True))
    return lambda text: pattern.sub(lambda m: names[m.group(1)], text)


def history(originals: Sequence[Conversation], turns: int) -> list[Conversation]:
    """About ``turns`` turns, oldest first: copies of ``originals`` in rotation, then the
    originals themselves (with their questions). Fewer turns than the originals hold
    gives the most recent sessions of the originals alone (cut at a session's start)."""
    own = sum(len(c.turns) for c in originals)
    if turns <= own:
        return _latest(originals, turns)
    copies = list(_copies(originals, turns - own))
    return [*reversed(copies), *originals]


def _copies(originals: Sequence[Conversation], turns: int) -> Iterator[Conversation]:
    """Copies going back in time from the originals, until ``turns`` turns are made."""
    made, names = 0, itertools.count()
    for k in itertools.count(1):
        for conversation in originals:
            if made >= turns:
                return
            copy = renamed(conversation, k, pair(next(names)), SHIFT * k)
            made += len(copy.turns)
            yield copy


def _latest(originals: Sequence[Conversation], turns: int) -> list[Conversation]:
    kept: list[Conversation] = []
    for conversation in originals:
        share = turns * len(conversation.turns) // sum(len(c.turns) for c in originals)
        last = sorted({t.session for t in conversation.turns}, reverse=True)
        sessions: set[int] = set()
        for number in last:
            if sum(1 for t in conversation.turns if t.session in sessions | {number}) > share:
                break
            sessions.add(number)
        kept.append(replace(conversation,
                            turns=[t for t in conversation.turns if t.session in sessions]))
    return kept


def count(conversations: Sequence[Conversation]) -> int:
    return sum(len(c.turns) for c in conversations)


__all__ = ["ALIKE", "NAMES", "PAIRS", "Turn", "alike", "count", "history", "pair", "renamed",
           "speakers"]
