"""The stored form of an "Always allow" terminal approval.

An approval is a plain sequence of words (``git status``, ``npm run test``): no quotes,
escapes, shell metacharacters, non-ASCII or control characters, no shell keyword and no
environment assignment first. It lives in ``memq/`` because the client, the writer (which
refuses a ``prefix.allowed`` event carrying anything else) and the configuration must
agree on it; the matcher that uses approvals is :mod:`producers.terminal`.
"""

from __future__ import annotations

import re
import unicodedata

from memq.errors import ValidationError

__all__ = ["normalize_prefix"]

_PREFIX_METACHARS = frozenset(";&|`$()<>\n'\"\\")
_PREFIX_WORD = re.compile(r"[A-Za-z0-9_./:@+,=-]+")
_KEYWORDS = frozenset(
    {"if", "then", "else", "elif", "fi", "case", "esac", "for", "select", "while", "until"}
    | {"do", "done", "function", "coproc"}
)


def normalize_prefix(command: str) -> str:
    """Return the stored form of an "Always allow" approval, or raise ValidationError."""
    if not isinstance(command, str):
        raise ValidationError("prefix must be a string")
    if "\x00" in command:
        raise ValidationError("prefix contains a NUL character")
    for ch in command:
        if ch in _PREFIX_METACHARS:
            raise ValidationError(f"prefix contains a shell metacharacter {ch!r}")
        if not ch.isascii():
            raise ValidationError(f"prefix contains a non-ASCII character {ch!r}")
        if unicodedata.category(ch) == "Cc" and ch != "\t":
            raise ValidationError(f"prefix contains a control character {ch!r}")
    words = command.split()
    if not words:
        raise ValidationError("prefix is empty")
    _check_prefix_words(words)
    return " ".join(words)


def _check_prefix_words(words: list[str]) -> None:
    for word in words:
        if not _PREFIX_WORD.fullmatch(word):
            bad = next(ch for ch in word if not _PREFIX_WORD.fullmatch(ch))
            raise ValidationError(f"prefix contains an unsupported character {bad!r}")
    if words[0] in _KEYWORDS:
        raise ValidationError(f"prefix starts with the shell keyword {words[0]!r}")
    if "=" in words[0]:
        raise ValidationError("prefix starts with an environment assignment")
