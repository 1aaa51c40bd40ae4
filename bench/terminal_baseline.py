"""The terminal matcher as it was before it understood comments (commit 9b65715).

Kept only as bench/terminal.py's baseline, so the new matcher's speed is compared with
its predecessor's on the same machine in the same run. It is unsafe (a comment can hide
a second command from it): never use it to decide anything.
"""

from __future__ import annotations

import re
import unicodedata
from collections.abc import Iterable
from dataclasses import dataclass

from memq.approvals import normalize_prefix
from memq.errors import ValidationError

__all__ = ["is_command_allowed", "normalize_prefix"]

_UNSAFE_CATEGORIES = frozenset({"Cc", "Cf", "Cs", "Co", "Cn", "Zl", "Zp", "Zs"})
_FORBIDDEN_BARE = frozenset("$`()<!")
_FD_DUP = re.compile(r">&[0-9]+(?=[ \t\n;&|]|$)")


class _Reject(Exception):
    """Internal: the command contains something the matcher refuses."""


@dataclass(frozen=True)
class _Word:
    text: str
    bare: bool  # no quote and no escape anywhere in the word


def is_command_allowed(command: str, prefixes: Iterable[str], *, trusted: bool = False) -> bool:
    """True if ``command`` may run without asking, given the approved ``prefixes``."""
    if not isinstance(command, str):
        raise ValidationError("command must be a string")
    if trusted:
        return True
    if isinstance(prefixes, str):
        raise ValidationError("prefixes must be an iterable of strings, not one string")
    approved = _approved_words(prefixes)
    if not approved:
        return False
    try:
        segments = _Scanner(command).scan()
    except _Reject:
        return False
    return all(any(_matches(words, p) for p in approved) for words in segments)


def _approved_words(prefixes: Iterable[str]) -> list[tuple[str, ...]]:
    approved: list[tuple[str, ...]] = []
    for prefix in prefixes:
        try:
            approved.append(tuple(normalize_prefix(prefix).split()))
        except ValidationError:
            continue  # an unusable approval approves nothing
    return approved


def _matches(words: list[_Word], prefix: tuple[str, ...]) -> bool:
    if len(words) < len(prefix):
        return False
    return all(w.bare and w.text == p for w, p in zip(words[: len(prefix)], prefix, strict=True))


def _check_characters(text: str) -> None:
    for ch in text:
        if ch in " \t\n":
            continue
        if unicodedata.category(ch) in _UNSAFE_CATEGORIES:
            raise _Reject(f"control, invisible or unusual space character {ch!r}")


class _Scanner:
    """A small, conservative shell tokenizer: segments of words, or ``_Reject``."""

    def __init__(self, command: str) -> None:
        self.text = command.strip(" \t\n")
        self.pos = 0
        self.segments: list[list[_Word]] = []
        self.separators: list[str] = []
        self.words: list[_Word] = []
        self.chars: list[str] = []
        self.bare = True
        self.started = False

    def scan(self) -> list[list[_Word]]:
        if not self.text:
            raise _Reject("empty command")
        _check_characters(self.text)
        while self.pos < len(self.text):
            self._step(self.text[self.pos])
        self._end_segment("")
        self._check_segments()
        return self.segments

    def _step(self, ch: str) -> None:
        if ch in " \t":
            self._end_word()
            self.pos += 1
        elif ch in ";\n":
            self._separate(ch, 1)
        elif ch in "&|":
            self._operator(ch)
        elif ch == ">":
            self._redirect()
        elif ch == "'":
            self._single_quote()
        elif ch == '"':
            self._double_quote()
        elif ch == "\\":
            self._escape()
        elif ch in _FORBIDDEN_BARE or not ch.isascii():
            raise _Reject(f"unquoted {ch!r}")
        else:
            self._add(ch, bare=True)
            self.pos += 1

    def _peek(self, offset: int) -> str:
        index = self.pos + offset
        return self.text[index] if index < len(self.text) else ""

    def _add(self, text: str, *, bare: bool) -> None:
        self.chars.append(text)
        self.started = True
        self.bare = self.bare and bare

    def _end_word(self) -> None:
        if self.started:
            self.words.append(_Word("".join(self.chars), self.bare))
        self.chars, self.bare, self.started = [], True, False

    def _end_segment(self, separator: str) -> None:
        self._end_word()
        self.segments.append(self.words)
        self.separators.append(separator)
        self.words = []

    def _separate(self, separator: str, length: int) -> None:
        self._end_segment(separator)
        self.pos += length

    def _operator(self, ch: str) -> None:
        pair = ch + self._peek(1)
        if pair == "&>":
            raise _Reject("&> redirection")
        if pair in ("&&", "||", "|&"):
            self._separate(pair, 2)
        else:
            self._separate(ch, 1)

    def _redirect(self) -> None:
        fd_number = self.bare and "".join(self.chars).isdigit()
        if self.started and not fd_number:
            raise _Reject("redirection glued to a word")
        match = _FD_DUP.match(self.text, self.pos)
        if match is None:
            raise _Reject("output redirection to a file")
        self.chars, self.bare, self.started = [], True, False  # drop the fd number
        self.pos = match.end()

    def _single_quote(self) -> None:
        end = self.text.find("'", self.pos + 1)
        if end < 0:
            raise _Reject("unterminated single quote")
        self._add(self.text[self.pos + 1 : end], bare=False)
        self.pos = end + 1

    def _double_quote(self) -> None:
        index, out = self.pos + 1, list[str]()
        while index < len(self.text):
            ch = self.text[index]
            if ch == '"':
                self._add("".join(out), bare=False)
                self.pos = index + 1
                return
            if ch in "$`!":
                raise _Reject(f"{ch!r} inside double quotes")
            if ch == "\\":
                index = self._dquote_escape(index, out)
            else:
                out.append(ch)
                index += 1
        raise _Reject("unterminated double quote")

    def _dquote_escape(self, index: int, out: list[str]) -> int:
        nxt = self.text[index + 1 : index + 2]
        if nxt == "\n":
            raise _Reject("line continuation")
        if nxt and nxt in '"\\':
            out.append(nxt)
            return index + 2
        out.append("\\")  # any other backslash is literal inside double quotes
        return index + 1

    def _escape(self) -> None:
        nxt = self._peek(1)
        if nxt == "":
            raise _Reject("trailing backslash")
        if nxt == "\n":
            raise _Reject("line continuation")
        if nxt in "$`" or not nxt.isascii():
            raise _Reject(f"escaped {nxt!r}")
        self._add(nxt, bare=False)
        self.pos += 2

    def _check_segments(self) -> None:
        last = len(self.segments) - 1
        for index, words in enumerate(self.segments):
            if words:
                continue
            if index == last and index > 0 and self.separators[index - 1] == ";":
                continue  # a harmless trailing ";"
            raise _Reject("empty segment (stray or trailing operator)")
        if not self.segments[-1]:
            self.segments.pop()
