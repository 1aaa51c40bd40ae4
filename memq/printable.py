"""Text that came from outside, made safe to print on a terminal and to bound in size.

Message content, rejection reasons and ids are written by agents (or by whoever can
reach Redis). Printed raw, an ESC or CSI sequence in them can rewrite the screen, set
the window title or hide the lines before it; a bidirectional override can make text
read differently from what it is. Here each such character becomes its escape
(``\\x1b``), so what is printed is what is stored, and nothing acts on the terminal.
"""

from __future__ import annotations

import re

__all__ = ["bounded", "printable", "shown"]

_UNSAFE = re.compile(
    r"[\x00-\x08\x0b-\x1f\x7f-\x9f"  # C0 and C1 controls but tab and newline
    r"\u2028\u2029\u202a-\u202e\u2066-\u2069"  # line separators, bidirectional overrides
    r"\ud800-\udfff]"  # lone surrogates (cannot even be encoded)
)
_UNSAFE_ONE_LINE = re.compile(_UNSAFE.pattern.replace(r"\x00-\x08\x0b-\x1f", r"\x00-\x1f"))


def printable(text: str, *, one_line: bool = False) -> str:
    """``text`` with every character that acts on a terminal shown as its escape.

    ``one_line`` escapes tab and newline too (for one-line listings and log fields).
    """
    unsafe = _UNSAFE_ONE_LINE if one_line else _UNSAFE
    return unsafe.sub(_escape, text)


def bounded(text: str, limit: int) -> str:
    """``printable(text, one_line=True)`` cut to at most ``limit`` characters, saying so.

    Idempotent: bounding a bounded text changes nothing.
    """
    text = printable(text, one_line=True)
    if len(text) <= limit:
        return text
    # The count is at most len(text), so a suffix sized for it leaves room for the real one.
    keep = max(0, limit - len(f"… ({len(text)} more characters)"))
    return f"{text[:keep]}… ({len(text) - keep} more characters)"


def shown(value: object) -> str:
    """``repr(value)`` for an error message, or what the value is when it has no repr: an
    int past Python's 4,300-digit conversion limit (``10**5000`` passed as a limit or a
    flag) makes ``repr`` raise ``ValueError``, which must not replace the message."""
    try:
        return repr(value)
    except Exception:
        if isinstance(value, int):
            return f"an integer of about {int(value.bit_length() * 0.30103)} digits"
        return f"a {type(value).__name__} that cannot be shown"


def _escape(match: re.Match[str]) -> str:
    return repr(match.group())[1:-1]
