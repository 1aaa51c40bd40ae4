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
    # The principle: a program (or builtin) whose arguments name another program, or shell
    # code, for it to start, now or later. Approving its name would approve whatever it is
    # given, so the approval must name the program it runs instead. By family:
    # - privilege and identity
    {"sudo", "sudoedit", "doas", "su", "runuser", "pkexec", "sg", "newgrp", "setpriv"}
    | {"capsh", "runcon", "chpst", "setuidgid", "fakeroot", "fakechroot"}
    # - environment, limits, priority, I/O and time
    | {"env", "envdir", "exec", "nohup", "nice", "ionice", "timeout", "time", "stdbuf"}
    | {"setsid", "flock", "setlock", "chrt", "taskset", "numactl", "prlimit", "softlimit"}
    | {"cpulimit", "cgexec", "schedtool", "trickle", "nocache", "eatmydata", "faketime"}
    | {"unbuffer", "script", "caffeinate", "chronic", "catchsegv", "xvfb-run"}
    # - namespaces, containers, sandboxes, remote hosts
    | {"chroot", "nsenter", "unshare", "firejail", "bwrap", "nsjail", "minijail0"}
    | {"systemd-run", "systemd-nspawn", "machinectl", "flatpak-spawn", "docker"}
    | {"podman", "kubectl", "lxc-attach", "ssh", "mosh", "rsh", "sshpass"}
    | {"proxychains", "proxychains4", "torsocks", "tsocks", "dbus-run-session"}
    | {"dbus-launch"}
    # - debuggers, tracers, profilers
    | {"strace", "ltrace", "gdb", "gdbserver", "lldb", "rr", "valgrind", "perf"}
    # - terminal multiplexers and scripted sessions
    | {"tmux", "screen", "byobu", "dtach", "abduco", "expect"}
    # - running later, repeatedly, or in parallel
    | {"at", "batch", "watch", "entr", "watchexec", "xargs", "parallel", "sem", "tsp"}
    # - shells, multi-call binaries and file-sourcing: `bash -c ...`, `. ./x.sh`
    | {"sh", "bash", "dash", "zsh", "ksh", "mksh", "yash", "fish", "csh", "tcsh", "rbash"}
    | {"busybox", "toybox", "source", "."}
    # - builtins that run, or change how the shell runs, commands given to them or after
    #   them (aliases, traps, PATH, options, completion commands: `compgen -C cmd`)
    | {"eval", "command", "builtin", "fc", "compgen", "complete", "bind"}
    | {"alias", "unalias", "trap", "export", "set", "unset", "shopt", "enable", "hash"}
    | {"declare", "typeset", "readonly", "local"}
    # - bash evaluates an array subscript in a variable name they take:
    #   printf -v 'a[$(id)]' x runs id even though the argument is single-quoted
    | {"printf", "read", "test", "[", "[[", "let", "mapfile", "readarray", "getopts"}
    | {"wait"}
)
"""First words refused in an approval: each starts, or changes how the shell starts, a
command named in its arguments or after it, so approving it would approve anything. The
check is on the program's name, so ``/usr/bin/sudo`` counts too; approve the wrapped
command instead (``git status``, not ``nice git status``). A new wrapper is added by the
principle in the comment above, not when someone finds it."""


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
