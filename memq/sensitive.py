"""Values that look like credentials: what learned macros must never keep or suggest.

A tool call's arguments can hold a bearer token, a password or an API key. Macros are
learned across sessions, so a value kept in a template would be suggested to every
session. These rules decide what is secret-looking, by the argument's name
(``password``, ``api_key``, ``Authorization``...) or by the value's shape (``Bearer ...``,
a JWT, a private key, a credential in a URL, a known token prefix such as ``sk-`` or
``ghp_``, ``password=...``, or a long random-looking word). They err on the side of
hiding: a false alarm costs a placeholder in a suggestion, a miss costs a credential.
"""

from __future__ import annotations

import math
import re
from collections import Counter

__all__ = ["SECRET", "looks_secret", "secret_name", "secret_text", "secret_word"]

SECRET = "<secret>"
"""What a secret-looking value becomes."""

_NAME = re.compile(
    r"(?:^|[^a-z])(?:pass(?:word|wd|phrase)?|pwd|secret|token|api[-_]?key|apikey"
    r"|access[-_]?key|private[-_]?key|auth(?:orization)?|bearer|cookie|set[-_]?cookie"
    r"|session[-_]?(?:id|key|token)|credentials?|signature|otp|pin)(?:$|[^a-z])",
    re.IGNORECASE,
)
_TEXT = re.compile(
    # Authorization values: a scheme, then a token with a digit or base64 punctuation in it
    r"\b(?:bearer|basic|token|digest)\s+(?=\S*[0-9+/=])[A-Za-z0-9._~+/=-]{8,}"
    r"|eyJ[A-Za-z0-9_-]{8,}\.[A-Za-z0-9_-]{8,}\.[A-Za-z0-9_-]*"  # a JWT
    r"|-----BEGIN [A-Z ]*PRIVATE KEY-----"
    # a URL with a password (a bounded scheme: unbounded, a long word costs n² to search)
    r"|[A-Za-z][A-Za-z0-9+.-]{0,31}://[^\s/:@]*:[^\s@/]+@"
    r"|(?<![a-z])(?:pass(?:word|wd)?|pwd|secret|token|api[-_]?key|access[-_]?key)"
    r"['\"]?\s*[=:]\s*\S+"  # PASSWORD=..., "api_key": ...
    r"|" + "|".join((
        r"\b(?:sk|pk|rk)_(?:live|test)_[A-Za-z0-9]{8,}",  # Stripe
        r"\bsk-[A-Za-z0-9_-]{16,}",  # OpenAI and alike
        r"\bgh[pousr]_[A-Za-z0-9]{20,}", r"\bgithub_pat_[A-Za-z0-9_]{20,}",  # GitHub
        r"\bglpat-[A-Za-z0-9_-]{20,}",  # GitLab
        r"\bxox[abprs]-[A-Za-z0-9-]{10,}",  # Slack
        r"\bAKIA[0-9A-Z]{16}\b", r"\bAIza[0-9A-Za-z_-]{30,}",  # AWS, Google
        r"\bhf_[A-Za-z0-9]{30,}", r"\bnpm_[A-Za-z0-9]{30,}",  # Hugging Face, npm
    )),
    re.IGNORECASE,
)
_WORD = re.compile(r"[A-Za-z0-9+/=_-]{24,}")
_HEX_OR_UUID = re.compile(r"[0-9a-fA-F-]+")
MIN_ENTROPY_BITS = 3.5
"""Per character: random base64 or alphanumerics score above 4, words and names below 3.5."""


def secret_name(name: str) -> bool:
    """Whether an argument called ``name`` holds a secret (``password``, ``X-Api-Key``...)."""
    return _NAME.search(name) is not None


def secret_text(text: str) -> bool:
    """Whether ``text`` holds something shaped like a credential, anywhere in it."""
    return _TEXT.search(text) is not None or any(secret_word(w) for w in text.split())


def secret_word(word: str) -> bool:
    """A long, random-looking word (a key or a token with no telltale prefix).

    Hex strings and UUIDs are ids (commits, messages), not counted here; letters of both
    cases and digits together, with high entropy, are.
    """
    if not _WORD.fullmatch(word) or _HEX_OR_UUID.fullmatch(word):
        return False
    if not (any(c.isupper() for c in word) and any(c.islower() for c in word)
            and any(c.isdigit() for c in word)):
        return False
    counts = Counter(word)
    entropy = -sum(n / len(word) * math.log2(n / len(word)) for n in counts.values())
    return entropy >= MIN_ENTROPY_BITS


def looks_secret(value: object, name: str | None = None) -> bool:
    """Whether an argument value (called ``name``, if known) must not be kept."""
    if isinstance(value, bool) or value is None:
        return False
    if name is not None and secret_name(name) and isinstance(value, (str, int, float)):
        return True
    return isinstance(value, str) and secret_text(value)
