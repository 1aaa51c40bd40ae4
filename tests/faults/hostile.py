"""Hostile values shared by the hostile-input tests, and the table type they fill.

A :class:`Case` is one call with one bad (or merely odd) argument and the exact outcome:
the error class and a fragment of its message, or ``None`` for an input that is valid,
however odd it looks (SQL, markup, escapes), and must be stored and read back verbatim.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from memq.errors import ValidationError

SQL_LOOKING = (
    "'; DROP TABLE messages; --",
    "Robert'); DELETE FROM events WHERE ('1'='1",
    "\" OR 1=1 --",
    "x' UNION SELECT embedding FROM messages --",
    "%s %d {0} ${HOME} $(id) `id`",
    "<script>alert(1)</script>",
    "\u202eevil right-to-left override",
    "PRAGMA writable_schema=ON; ATTACH DATABASE '/tmp/x' AS x",
)
"""Valid text that looks like an attack: it must be stored verbatim, never interpreted."""


@dataclass(frozen=True)
class Case:
    label: str
    method: str
    args: tuple[Any, ...] = ()
    kwargs: dict[str, Any] = field(default_factory=dict)
    error: type[Exception] | None = ValidationError
    fragment: str = ""

    @property
    def id(self) -> str:
        return f"{self.method}: {self.label}"


def bad_identifiers(what: str, *, max_chars: int = 200) -> list[tuple[str, Any, str]]:
    """(label, value, expected message fragment) for a text identifier named ``what``."""
    return [
        ("None", None, f"{what} must be a string, got NoneType"),
        ("an int", 42, f"{what} must be a string, got int"),
        ("bytes", b"s1", f"{what} must be a string, got bytes"),
        ("a list", ["s1"], f"{what} must be a string, got list"),
        ("a dict", {"$ne": None}, f"{what} must be a string, got dict"),
        ("empty", "", f"{what} must not be empty"),
        ("blank", " \t ", f"{what} must not be empty"),
        ("too long", "s" * (max_chars + 1),
         f"{what} is {max_chars + 1} characters, over the {max_chars} limit"),
        ("huge", "s" * 1_000_000, f"{what} is 1000000 characters, over the {max_chars} limit"),
        ("a NUL byte", "s\x00", f"{what} contains a control character"),
        ("a newline", "s\n1", f"{what} contains a control character"),
        ("a terminal escape", "s\x1b[2J", f"{what} contains a control character"),
        ("DEL", "s\x7f", f"{what} contains a control character"),
        ("a lone high surrogate", "s\ud800", f"{what} contains a lone surrogate"),
        ("a lone low surrogate", "\udfff", f"{what} contains a lone surrogate"),
    ]


def deep_list(depth: int) -> Any:
    value: Any = "bottom"
    for _ in range(depth):
        value = [value]
    return value


def deep_dict(depth: int) -> Any:
    value: Any = "bottom"
    for _ in range(depth):
        value = {"a": value}
    return value
