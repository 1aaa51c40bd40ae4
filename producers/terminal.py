"""The "always allow" matcher for terminal commands an agent wants to run.

The matcher reads a command the way bash and dash read it when they run it (``bash -c``,
``sh -c`` or a script file), and allows it only when every simple command in it begins
with an approved prefix and nothing else can run or write. Anything it does not fully
understand is refused: it fails closed. A trusted scheduled task skips the check.

What it understands:

- commands separated by ``;``, ``&&``, ``||``, ``|``, ``|&``, ``&`` (not last) and
  newlines; blank lines; a newline after ``&&``, ``||``, ``|`` or ``|&`` (the list goes
  on at the next line);
- a comment: ``#`` at the start of a word, up to the end of the line;
- single quotes; double quotes without ``$`` (but just before the closing quote, where it
  is literal) or backtick; backslash escapes (but not of ``$`` or backtick); a line
  continuation (backslash, newline) where no word has begun; inside quotes, non-ASCII
  spaces (literal in both shells);
- ``!`` only where an interactive bash would not expand history: before a blank, a
  newline, ``=``, the end, or the closing double quote (``echo "Done!"``);
- redirections that write nowhere: ``>&2``, ``2>&1`` (onto stdout or stderr only: ``>&9``
  may be a file the caller opened), and to or
  from ``/dev/null`` (``> /dev/null``, ``2>>/dev/null``, ``< /dev/null``; ``&>/dev/null``
  only at the end of a command, because dash reads ``&>`` as ``&`` then ``>``);
- here-documents (``<<EOF``, ``<<'EOF'``, ``<<-EOF``) whose body the shell does not
  expand: a quoted delimiter, or a body without ``$``, backtick or backslash;
- a carriage return only in a CRLF line ending, where, as in bash, it belongs to the
  last word of the line (so ``git status\\r\\n`` is not ``git status``).

A prefix matches a command's first words literally, each one bare (no quote, no escape):
``ls`` allows ``ls -la`` but not ``lsblk``; ``git status`` allows ``git status -s`` but
not ``git push``. So an environment assignment, a keyword (``if``, ``{``, ``!``), a path
or any expansion in those words is refused. Everything else is refused too: ``$`` and
backticks outside single quotes, ``(`` and ``)``, other redirections, control, invisible
and line-separator characters anywhere, non-ASCII characters outside quotes, comments and
here-documents, unterminated quotes, empty commands and stray operators.

Approvals themselves are plain word sequences (see :func:`normalize_prefix`, which lives
in :mod:`memq.approvals` so the writer and the configuration check approvals with the
same rule).
"""

from __future__ import annotations

import re
import unicodedata
from collections.abc import Iterable
from functools import lru_cache
from typing import NamedTuple

from memq.approvals import normalize_prefix
from memq.errors import ValidationError

__all__ = ["is_command_allowed", "normalize_prefix"]

# Not "Zs" (no-break and other spaces): outside quotes the reader refuses every non-ASCII
# character anyway, and inside quotes both shells take such a space literally.
_UNSAFE_CATEGORIES = frozenset({"Cc", "Cf", "Cs", "Co", "Cn", "Zl", "Zp"})
_ASCII_CONTROL = re.compile(r"[\x00-\x08\x0b\x0c\x0e-\x1f\x7f]|\r(?!\n|\Z)")
_NON_ASCII = re.compile(r"[^\x00-\x7f]")

# Characters that are literal in an unquoted word (``#`` only after the word has begun).
_PLAIN = re.compile(r"[\r#%*+,\-./0-9:=?@A-Z\[\]^_a-z{}~]+")
_DOUBLE_QUOTED = re.compile(r'[^"\\$`!]+')
_END_OF_WORD = r"(?=[ \t\n;&|]|\Z)"
# Onto stdout or stderr only: another descriptor may be a file the caller opened (>&9).
_FD_DUP = re.compile(r">&[12]" + _END_OF_WORD)
_DEV_NULL = re.compile(r"[ \t]*/dev/null" + _END_OF_WORD)
_HEREDOC = re.compile(
    r"<<(-?)[ \t]*(?:'(?P<single>\w+)'|\"(?P<double>\w+)\"|(?P<bare>\w+))" + _END_OF_WORD,
    re.ASCII,
)
_EXPANDED_IN_HEREDOC = re.compile(r"[$`\\]")
_NO_HISTORY_AFTER = frozenset(" \t\r\n=")
_FOLLOWS_A_COMMAND = frozenset({"&&", "||", "|", "|&"})


class _Reject(Exception):
    """Internal: the command contains something the matcher refuses."""


class _Word(NamedTuple):
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
        commands = _Reader(command).read()
    except _Reject:
        return False
    return all(any(_matches(words, p) for p in approved) for words in commands)


def _approved_words(prefixes: Iterable[str]) -> list[tuple[str, ...]]:
    approved = (_prefix_words(p) for p in prefixes if isinstance(p, str))
    return [words for words in approved if words]


@lru_cache(maxsize=4096)
def _prefix_words(prefix: str) -> tuple[str, ...]:
    try:
        return tuple(normalize_prefix(prefix).split())
    except ValidationError:
        return ()  # an unusable approval approves nothing


def _matches(words: list[_Word], prefix: tuple[str, ...]) -> bool:
    if len(words) < len(prefix):
        return False
    return all(w.bare and w.text == p for w, p in zip(words, prefix, strict=False))


def _check_characters(text: str) -> None:
    if _ASCII_CONTROL.search(text):
        raise _Reject("control character (or a carriage return outside a CRLF)")
    if text.isascii():
        return
    for ch in set(_NON_ASCII.findall(text)):
        if unicodedata.category(ch) in _UNSAFE_CATEGORIES:
            raise _Reject(f"invisible or unusual space character {ch!r}")


class _Reader:
    """Reads a command as the shell would: simple commands (lists of words), or _Reject."""

    def __init__(self, command: str) -> None:
        self.text = command
        self.pos = 0
        self.commands: list[list[_Word]] = []
        self.words: list[_Word] = []
        self.chars: list[str] = []
        self.bare = True
        self.started = False  # a word is being read
        self.redirected = False  # the current command has a redirection
        self.closed_by_and_null = False  # ... and its last one was &>/dev/null
        self.needs_command = False  # after && || | |&: another command must follow
        self.in_background = False  # the last command ended with &
        self.heredocs: list[tuple[str, bool, bool]] = []  # (delimiter, strip tabs, quoted)

    def read(self) -> list[list[_Word]]:
        _check_characters(self.text)
        while self.pos < len(self.text):
            self._step()
        self._end_command()
        if self.heredocs:
            raise _Reject("here-document without its body")
        if self.needs_command or self.in_background:
            raise _Reject("the command ends with an operator or a background job")
        if not self.commands:
            raise _Reject("no command")
        return self.commands

    def _step(self) -> None:
        text, pos = self.text, self.pos
        ch = text[pos]
        if ch == "#" and not self.started:
            end = text.find("\n", pos)  # a comment runs to the end of the line
            self.pos = len(text) if end < 0 else end
            return
        plain = _PLAIN.match(text, pos)
        if plain:
            self._add(plain.group(), bare=True)
            self.pos = plain.end()
        elif ch in " \t":
            self._end_word()
            self.pos += 1
        else:
            self._special(ch)

    def _special(self, ch: str) -> None:
        if ch == "\n":
            self._newline()
        elif ch in ";&|":
            self._operator(ch)
        elif ch in "<>":
            self._redirect(ch)
        elif ch == "'":
            self._single_quote()
        elif ch == '"':
            self._double_quote()
        elif ch == "\\":
            self._escape()
        elif ch == "!":
            self._bang()
        else:
            raise _Reject(f"unquoted {ch!r}")

    # words

    def _add(self, text: str, *, bare: bool) -> None:
        if self.closed_by_and_null:
            raise _Reject("a word after &>: dash reads it as a new command")
        self.chars.append(text)
        self.started = True
        self.bare = self.bare and bare

    def _end_word(self) -> None:
        if self.started:
            self.words.append(_Word("".join(self.chars), self.bare))
        self.chars, self.bare, self.started = [], True, False

    def _single_quote(self) -> None:
        end = self.text.find("'", self.pos + 1)
        if end < 0:
            raise _Reject("unterminated single quote")
        self._add(self.text[self.pos + 1 : end], bare=False)
        self.pos = end + 1

    def _double_quote(self) -> None:
        text, index, out = self.text, self.pos + 1, list[str]()
        while index < len(text):
            run = _DOUBLE_QUOTED.match(text, index)
            if run:
                out.append(run.group())
                index = run.end()
                continue
            ch = text[index]
            if ch == '"':
                self._add("".join(out), bare=False)
                self.pos = index + 1
                return
            index = self._double_quoted_special(ch, index, out)
        raise _Reject("unterminated double quote")

    def _double_quoted_special(self, ch: str, index: int, out: list[str]) -> int:
        following = self.text[index + 1 : index + 2]
        if ch == "!" and (following == '"' or following in _NO_HISTORY_AFTER):
            out.append(ch)
            return index + 1
        if ch == "$" and following == '"':  # "costs 5$": nothing follows to expand
            out.append(ch)
            return index + 1
        if ch != "\\":
            raise _Reject(f"{ch!r} inside double quotes")
        if following == "\n":
            raise _Reject("line continuation inside double quotes")
        if following in ('"', "\\"):
            out.append(following)
            return index + 2
        out.append("\\")  # any other backslash is literal inside double quotes
        return index + 1

    def _escape(self) -> None:
        following = self.text[self.pos + 1 : self.pos + 2]
        if following == "\n":
            if self.started:  # l\<newline>s is "ls" to the shell: refuse to guess
                raise _Reject("line continuation inside a word")
            self.pos += 2
            return
        if following == "" or following in "$`" or not following.isascii():
            raise _Reject(f"escaped {following!r}")
        self._add(following, bare=False)
        self.pos += 2

    def _bang(self) -> None:
        following = self.text[self.pos + 1 : self.pos + 2]
        if following and following not in _NO_HISTORY_AFTER:
            raise _Reject("'!' that an interactive bash expands from its history")
        self._add("!", bare=True)
        self.pos += 1

    # commands and operators

    def _end_command(self) -> None:
        self._end_word()
        if self.words:
            self.commands.append(self.words)
            self.needs_command = self.in_background = False
        elif self.redirected:
            raise _Reject("a redirection without a command")
        self.words, self.redirected, self.closed_by_and_null = [], False, False

    def _newline(self) -> None:
        self._end_command()
        self.pos += 1
        if self.heredocs:
            self._read_heredoc_bodies()

    def _operator(self, ch: str) -> None:
        pair = self.text[self.pos : self.pos + 2]
        if pair == "&>":
            self._and_redirect()
            return
        operator = pair if pair in ("&&", "||", "|&", ";;") else ch
        if operator == ";;":
            raise _Reject("';;' outside a case statement")
        self._end_word()
        if not self.words:
            raise _Reject(f"{operator!r} without a command before it")
        self._end_command()
        self.needs_command = operator in _FOLLOWS_A_COMMAND
        self.in_background = operator == "&"
        self.pos += len(operator)

    # redirections

    def _redirect(self, ch: str) -> None:
        fd = self._take_fd_number()
        if self.text.startswith("<<", self.pos) and fd is None:
            self._heredoc()
        elif ch == ">" and _FD_DUP.match(self.text, self.pos):
            self.pos += 3
        else:
            operator = ">>" if self.text.startswith(">>", self.pos) else ch
            self._to_dev_null(self.pos + len(operator))
        self.redirected = True

    def _take_fd_number(self) -> str | None:
        """The one-digit file descriptor glued before a redirection, if any."""
        if not self.started:
            return None
        fd = "".join(self.chars)
        if not (self.bare and len(fd) == 1 and fd.isdigit()):
            raise _Reject("redirection glued to a word")  # dash reads 10> as "10" then >
        self.chars, self.bare, self.started = [], True, False
        return fd

    def _to_dev_null(self, start: int) -> None:
        target = _DEV_NULL.match(self.text, start)
        if target is None:
            raise _Reject("redirection to or from somewhere other than /dev/null")
        self.pos = target.end()

    def _and_redirect(self) -> None:
        self._end_word()
        operator = "&>>" if self.text.startswith("&>>", self.pos) else "&>"
        self._to_dev_null(self.pos + len(operator))
        self.redirected = True
        self.closed_by_and_null = True

    def _heredoc(self) -> None:
        match = _HEREDOC.match(self.text, self.pos)
        if match is None:
            raise _Reject("here-string or here-document delimiter the matcher cannot read")
        bare = match.group("bare")
        delimiter = bare or match.group("single") or match.group("double")
        self.heredocs.append((delimiter, match.group(1) == "-", bare is None))
        self.pos = match.end()

    def _read_heredoc_bodies(self) -> None:
        for delimiter, strip_tabs, quoted in self.heredocs:
            tabs = r"\t*" if strip_tabs else ""
            end = re.compile(rf"^{tabs}{re.escape(delimiter)}$", re.M).search(
                self.text, self.pos)
            if end is None:
                raise _Reject(f"here-document without its {delimiter!r} line")
            body = self.text[self.pos : end.start()]
            if not quoted and _EXPANDED_IN_HEREDOC.search(body):
                raise _Reject("expansion in a here-document with an unquoted delimiter")
            self.pos = min(end.end() + 1, len(self.text))
        self.heredocs = []
