"""Run a command under the real bash and dash, and report everything it ran or wrote.

The terminal matcher's tests use this as their oracle: a command the matcher allows must
run nothing outside the allow-list. The oracle has to stay harmless when the matcher is
wrong, so a command never reaches the machine:

- it runs in its own user, pid, mount, network, IPC and UTS namespaces (``unshare``): it
  cannot signal a process outside, open a connection, or outlive its case;
- under a chroot that holds copies of bash, dash and their libraries, a directory of stub
  executables (the only ``PATH`` entry) and scratch directories: no real program is
  reachable, by name or by path, and nothing it writes is outside the chroot;
- every stub records its name and arguments and does nothing else; bash runs with ``-x``,
  which traces every simple command, builtins included (dash writes its trace in pieces
  that interleave between the jobs of a pipeline, so dash is judged by its stubs, its
  messages and the files alone); the tree is compared before and after. ``/dev/null``
  is a plain file the tree comparison ignores.

What the run saw is a :class:`ShellRun`; :meth:`ShellRun.violations` names everything
outside the approved prefixes: a program or builtin, a command the shell looked for and
did not find, a file written, created or removed, a case that did not finish.
"""

from __future__ import annotations

import re
import shlex
import shutil
import stat
import subprocess
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path

SHELLS = ("bash", "dash")
TIMEOUT = 10.0

# Names the stubs answer to: the approved programs, and a few forbidden ones so that a
# violation shows its arguments (any other name is "not found", itself a violation).
STUB_NAMES = (
    "ls", "git", "grep", "head", "cat", "npm", "find", "sort", "wc",
    "rm", "curl", "wget", "sh", "bash", "id", "env", "sudo", "xargs", "nohup", "time",
    "touch", "cp", "mv", "chmod", "python3", "node", "nc", "tee", "dd", "lsblk", "make",
)
# A stub exits with $STUB_STATUS: a run where every program fails shows what runs after
# `||`, which a run where they all succeed never reaches.
_STUB = """#!/bin/dash
printf '%s\\0' "${0##*/}" "$@" > "/log/call.$$"
exit "${STUB_STATUS:-0}"
"""

# pid 1 of the namespace, inside the chroot: run the case, then wait until every process
# it left behind (a background job) has ended, so that nothing it started goes unseen.
_INIT = """#!/bin/dash
: > /log/started
"$@" < /dev/null
status=$?
others() {
    for p in /proc/[0-9]*; do
        [ "$p" = /proc/1 ] && continue
        { read -r line < "$p/stat"; } 2>/dev/null || continue  # it ended meanwhile
        case $line in *") Z "*) continue ;; esac
        return 0
    done
    return 1
}
while others; do :; done
exit "$status"
"""

_UNSHARE_FLAGS = (
    "--user", "--map-root-user", "--pid", "--fork", "--kill-child", "--mount", "--net",
    "--ipc", "--uts", "--wd=/work", "--mount-proc=/proc",
)
_SHELL_FLAGS = {"bash": ("-x",), "dash": ()}
_ENV = {"PATH": "/stubs", "HOME": "/home", "PS4": "+ ", "LC_ALL": "C"}
_SCRATCH = ("work", "home", "tmp", "log")
_UNTRACKED = frozenset({"log", "proc", "dev/null"})
_TRACE = re.compile(r"^\++ (.*)$")
_ATTEMPT = re.compile(
    r"not found|No such file|Not a directory|Permission denied|cannot|Read-only|[Nn]etwork"
)
_WORK_FILES = {
    "file.txt": "hello\nfoo bar\n",
    "notes.txt": "TODO: one\n",
    "README.md": "# readme\n",
    "src/a.py": "print('a')\n",
    "src/b.txt": "b\n",
}


@dataclass(frozen=True)
class ShellRun:
    """What one shell did with one command."""

    shell: str
    command: str
    calls: tuple[tuple[str, ...], ...]
    """argv of every stub started, its name first."""
    traced: tuple[str, ...]
    """the ``-x`` trace lines: every simple command the shell ran, builtins included."""
    diagnostics: tuple[str, ...]
    """the rest of stderr: the shell's own messages."""
    changed: tuple[str, ...]
    timed_out: bool
    returncode: int | None

    def violations(self, prefixes: Iterable[str]) -> list[str]:
        """Everything this run did that no approved prefix covers."""
        approved = [tuple(p.split()) for p in prefixes]
        found = [f"ran {list(argv)}" for argv in self.calls if not _covered(argv, approved)]
        found += [f"traced {line!r}" for line in self.traced
                  if not _covered(_trace_words(line), approved)]
        found += [f"shell said {line!r}" for line in self.diagnostics if _ATTEMPT.search(line)]
        found += [f"changed {path}" for path in self.changed]
        if self.timed_out:
            found.append("did not finish")
        return found


def _covered(words: Sequence[str], approved: list[tuple[str, ...]]) -> bool:
    return any(tuple(words[: len(p)]) == p for p in approved)


def _trace_words(line: str) -> list[str]:
    try:
        return shlex.split(line)
    except ValueError:  # an argument spread over several lines, or $'...' quoting
        return line.split()


class ShellSandbox:
    """A chroot with bash, dash and stubs; :meth:`run` runs one command in it."""

    def __init__(self, root: Path) -> None:
        self.root = root
        self.unshare = _require("unshare")
        self.shells = {name: _require(name) for name in SHELLS}
        self.libraries = sorted({lib for path in self.shells.values() for lib in _libraries(path)})
        self._build()
        self.pristine = self._snapshot()

    def run(self, shell: str, command: str, *, programs_fail: bool = False) -> ShellRun:
        """Run ``command`` with ``shell``; every stub exits 1 if ``programs_fail``.

        A command holding a NUL is cut there, as every C program that receives it is.
        """
        argv = [self.unshare, *_UNSHARE_FLAGS, f"--root={self.root}", "--", "/bin/dash",
                "/init", f"/bin/{shell}", *_SHELL_FLAGS[shell], "-c", command.split("\0")[0]]
        env = {**_ENV, "STUB_STATUS": "1" if programs_fail else "0"}
        timed_out, returncode, stderr = False, None, b""
        try:
            done = subprocess.run(argv, env=env, stdin=subprocess.DEVNULL,
                                  stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                                  timeout=TIMEOUT, check=False)
            returncode, stderr = done.returncode, done.stderr
        except subprocess.TimeoutExpired as expired:
            timed_out, stderr = True, expired.stderr or b""
        text = stderr.decode("utf-8", "replace")
        if not (self.root / "log" / "started").exists():
            raise RuntimeError(f"the sandbox did not start (rc {returncode}): {text[-2000:]}")
        return self._collect(shell, command, text, timed_out, returncode)

    def _collect(self, shell: str, command: str, stderr: str, timed_out: bool,
                 returncode: int | None) -> ShellRun:
        lines = stderr.splitlines()
        traced = tuple(m.group(1) for m in map(_TRACE.match, lines) if m)
        diagnostics = tuple(line for line in lines if not _TRACE.match(line))
        calls = self._calls()
        changed = self._changes()
        self._reset(rebuild=bool(changed))
        return ShellRun(shell, command, calls, traced, diagnostics, changed, timed_out,
                        returncode)

    def _calls(self) -> tuple[tuple[str, ...], ...]:
        calls = []
        for path in sorted((self.root / "log").glob("call.*")):
            if path.is_symlink() or not path.is_file():
                continue
            fields = path.read_bytes().split(b"\0")[:-1]
            calls.append(tuple(f.decode("utf-8", "surrogateescape") for f in fields))
        return tuple(calls)

    def _changes(self) -> tuple[str, ...]:
        now = self._snapshot()
        names = set(now) | set(self.pristine)
        return tuple(sorted(n for n in names if now.get(n) != self.pristine.get(n)))

    def _snapshot(self) -> dict[str, tuple[int, int, int]]:
        """Path -> (type, size, mtime) for files; directories by type only (a file
        created and removed again, like bash's here-document, leaves no trace)."""
        seen: dict[str, tuple[int, int, int]] = {}
        for path in self.root.rglob("*"):
            relative = path.relative_to(self.root)
            if relative.parts[0] in _UNTRACKED or str(relative) in _UNTRACKED:
                continue
            info = path.lstat()
            kind = stat.S_IFMT(info.st_mode)
            sized = not stat.S_ISDIR(info.st_mode)
            seen[str(relative)] = (kind, info.st_size if sized else 0,
                                   info.st_mtime_ns if sized else 0)
        return seen

    def _reset(self, *, rebuild: bool) -> None:
        null = self.root / "dev" / "null"
        if rebuild or not stat.S_ISREG(null.lstat().st_mode):
            shutil.rmtree(self.root)
            self._build()
            self.pristine = self._snapshot()
            return
        for path in (self.root / "log").iterdir():
            path.unlink()
        if null.lstat().st_size:
            null.write_bytes(b"")

    def _build(self) -> None:
        root = self.root
        for folder in ("bin", "stubs", "dev", "proc", *_SCRATCH):
            (root / folder).mkdir(parents=True, exist_ok=True)
        (root / "tmp").chmod(0o1777)
        (root / "dev" / "null").touch()
        for name, binary in self.shells.items():
            _copy_executable(binary, root / "bin" / name)
        for library in self.libraries:
            _copy_executable(library, root / library.relative_to("/"))
        _write_executable(root / "init", _INIT)
        for name in STUB_NAMES:
            _write_executable(root / "stubs" / name, _STUB)
        for name, text in _WORK_FILES.items():
            (root / "work" / name).parent.mkdir(parents=True, exist_ok=True)
            (root / "work" / name).write_text(text)


def _require(name: str) -> str:
    found = shutil.which(name, path="/usr/local/bin:/usr/bin:/bin:/usr/sbin:/sbin")
    if found is None:
        raise RuntimeError(f"{name} is not installed (`make bootstrap` installs the shells)")
    return found


def _libraries(binary: str) -> list[Path]:
    """The shared libraries and loader ``binary`` needs, from ``ldd``."""
    listed = subprocess.run(["ldd", binary], capture_output=True, text=True, check=True)
    return [Path(m.group(1)) for m in re.finditer(r"(/\S+) \(0x", listed.stdout)]


def _copy_executable(source: str | Path, target: Path) -> None:
    # A copy, never a link: a command that writes to /bin/bash in the chroot must not
    # reach the real one.
    target.parent.mkdir(parents=True, exist_ok=True)
    shutil.copyfile(Path(source).resolve(), target)
    target.chmod(0o755)


def _write_executable(path: Path, text: str) -> None:
    path.write_text(text)
    path.chmod(0o755)
