"""The stored form of an "Always allow" terminal approval.

An approval is a plain sequence of words (``git status``, ``npm run test``): no quotes,
escapes, shell metacharacters, non-ASCII or control characters, no shell keyword and no
environment assignment first, and no first word that runs or reshapes the command given in
its arguments (``sudo``, ``env``, ``xargs``, ``bash``... see :data:`RUNNERS`): approving
``sudo`` would approve ``sudo`` followed by anything. It lives in ``memq/`` because the
client, the writer (which refuses a ``prefix.allowed`` event carrying anything else) and
the configuration must agree on it; the matcher that uses approvals is :mod:`producers.terminal`.
"""

from __future__ import annotations

import re
import unicodedata

from memq.errors import ValidationError

__all__ = ["RUNNERS", "normalize_prefix"]

_PREFIX_METACHARS = frozenset(";&|`$()<>\n'\"\\")
_PREFIX_WORD = re.compile(r"[A-Za-z0-9_./:@+,=-]+")
_KEYWORDS = frozenset(
    {"if", "then", "else", "elif", "fi", "case", "esac", "for", "select", "while", "until"}
    | {"do", "done", "function", "coproc"}
)

RUNNERS = frozenset(
    # run their arguments as a command (privileges, environment, timing, scheduling)
    {"sudo", "doas", "su", "runuser", "pkexec", "env", "exec", "eval", "xargs", "time"}
    | {"nohup", "nice", "ionice", "timeout", "command", "builtin", "stdbuf", "setsid"}
    | {"chroot", "nsenter", "unshare", "firejail", "flock", "chrt", "taskset", "strace"}
    | {"ltrace", "watch", "unbuffer", "script", "parallel", "busybox", "fakeroot"}
    | {"systemd-run", "caffeinate", "valgrind", "catchsegv", "ssh", "fc"}
    # shells and file-sourcing: `bash -c ...`, `. ./x.sh`
    | {"sh", "bash", "dash", "zsh", "ksh", "mksh", "yash", "fish", "csh", "tcsh", "rbash"}
    | {"source", "."}
    # change how the commands after them run (aliases, traps, PATH, options)
    | {"alias", "unalias", "trap", "export", "set", "unset", "shopt", "enable", "hash"}
    | {"declare", "typeset", "readonly", "local"}
    # bash evaluates an array subscript in a variable name they take:
    # printf -v 'a[$(id)]' x runs id even though the argument is single-quoted
    | {"printf", "read", "test", "[", "[[", "let", "mapfile", "readarray", "getopts"}
    | {"wait"}
)
"""First words refused in an approval: each runs, or changes how the shell runs, a command
named in its arguments or after it, so approving it would approve anything. The check is
on the program's name, so ``/usr/bin/sudo`` counts too; approve the wrapped command instead
(``git status``, not ``nice git status``)."""


def normalize_prefix(command: str, *, runners_ok: bool = False) -> str:
    """Return the stored form of an "Always allow" approval, or raise ValidationError.

    ``runners_ok`` lets a first word from :data:`RUNNERS` through: for what was stored
    before that rule (replaying the log, revoking such an approval), never to approve.
    """
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
    _check_prefix_words(words, runners_ok=runners_ok)
    return " ".join(words)


def _check_prefix_words(words: list[str], *, runners_ok: bool) -> None:
    for word in words:
        if not _PREFIX_WORD.fullmatch(word):
            bad = next(ch for ch in word if not _PREFIX_WORD.fullmatch(ch))
            raise ValidationError(f"prefix contains an unsupported character {bad!r}")
    if words[0] in _KEYWORDS:
        raise ValidationError(f"prefix starts with the shell keyword {words[0]!r}")
    if "=" in words[0]:
        raise ValidationError("prefix starts with an environment assignment")
    program = words[0].rsplit("/", 1)[-1] or words[0]
    if not runners_ok and (program in RUNNERS or words[0] in RUNNERS):
        raise ValidationError(
            f"prefix starts with {words[0]!r}, which can run other commands: "
            "approving it would approve anything; approve the command itself")
