"""Outside text made safe for a terminal (memq.printable)."""

from __future__ import annotations

import re

import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st

from memq.printable import bounded, printable, shown

ACTS_ON_A_TERMINAL = re.compile(
    r"[\x00-\x08\x0b-\x1f\x7f-\x9f\u2028\u2029\u202a-\u202e\u2066-\u2069\ud800-\udfff]")


@pytest.mark.parametrize(("text", "shown"), [
    ("plain text, 'quoted', ünïcødé ✓", "plain text, 'quoted', ünïcødé ✓"),
    ("\x1b[2J", r"\x1b[2J"),
    ("\x1b]0;owned\x07", r"\x1b]0;owned\x07"),
    ("\x9b31m", r"\x9b31m"),
    ("\u202egnp.exe", r"\u202egnp.exe"),
    ("a\tb\nc", "a\tb\nc"),
    ("\ud800", r"\ud800"),
])
def test_printable(text: str, shown: str) -> None:
    assert printable(text) == shown


def test_one_line_escapes_tabs_and_newlines_too() -> None:
    assert printable("a\tb\nc\rd", one_line=True) == r"a\tb\nc\rd"


def test_bounded_says_how_much_was_cut() -> None:
    assert bounded("x" * 600, 100) == "x" * 77 + "… (523 more characters)"
    assert len(bounded("x" * 600, 100)) == 100
    assert bounded("short", 100) == "short"


@settings(max_examples=500, derandomize=True, database=None)
@given(text=st.text(st.characters(codec=None), max_size=300), limit=st.integers(40, 400))
@example(text="\x1b" * 300, limit=40)
def test_nothing_that_acts_on_a_terminal_gets_through(text: str, limit: int) -> None:
    assert not ACTS_ON_A_TERMINAL.search(printable(text))
    one_line = bounded(text, limit)
    assert not ACTS_ON_A_TERMINAL.search(one_line)
    assert "\n" not in one_line
    assert len(one_line) <= limit
    assert bounded(one_line, limit) == one_line


@given(st.integers(min_value=10**4400, max_value=10**9000) | st.integers(-(10**5000), 10**20))
@settings(max_examples=50, derandomize=True, database=None)
def test_shown_never_raises_for_an_integer(value: int) -> None:
    """repr() of an int past Python's 4,300-digit limit raises ValueError: the message
    that names a bad argument must still be made."""
    text = shown(value)
    if abs(value) < 10**4000:
        assert text == repr(value)
    else:
        assert text.startswith("an integer of about ")
        assert text.endswith(" digits")


def test_shown_survives_a_failing_repr() -> None:
    class Hostile:
        def __repr__(self) -> str:
            raise RuntimeError("no")

    assert shown(Hostile()) == "a Hostile that cannot be shown"
    assert shown([10**5000]) == "a list that cannot be shown"
