"""A small foreground process supervisor for ``memq up`` (standard library only).

- Each child runs in its own process group, so Ctrl-C in a terminal reaches only the
  supervisor, which then stops the children in order instead of all at once.
- Every line a child prints is echoed with the child's name in front.
- A child that exits on its own is restarted after an exponential backoff; the backoff
  resets once the child has stayed up for a while. A child that keeps failing right after
  its start makes the supervisor give up, because restarting it forever would hide the
  error (a bad configuration, a second writer on the same database).
- Stopping goes by ``stop_order``, lowest first: a child's ``before_stop`` runs, then it
  gets SIGTERM, and SIGKILL if it is not gone after ``stop_timeout_s``.
- On Linux every child is asked to receive SIGTERM when the supervisor dies
  (``PR_SET_PDEATHSIG``), so even a killed supervisor leaves no orphans behind.
"""

from __future__ import annotations

import ctypes
import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import IO, TextIO

from memq.errors import MemqError

PR_SET_PDEATHSIG = 1
"""``prctl`` option: the signal the kernel sends a process when its parent dies (Linux)."""


@dataclass(frozen=True)
class ChildSpec:
    """One process of the table: what to run and how to treat it."""

    name: str
    argv: tuple[str, ...]
    stop_order: int = 0
    """Lower stops first; children of one order stop together."""
    restart: bool = True
    """False for a one-shot (``memq demo``): its exit is reported, not repaired."""
    env: Mapping[str, str] = field(default_factory=dict)
    before_stop: Callable[[], None] | None = None
    """Runs before the child gets SIGTERM (the writer waits for the inbox to drain)."""


@dataclass(frozen=True)
class Policy:
    backoff_s: float = 0.5
    backoff_max_s: float = 30.0
    stable_after_s: float = 10.0
    """A child up this long counts as healthy again: its backoff starts over."""
    max_quick_failures: int = 6
    """Exits in a row, each before ``stable_after_s``, after which the supervisor gives up."""
    stop_timeout_s: float = 30.0


class _Child:
    def __init__(self, spec: ChildSpec, policy: Policy) -> None:
        self.spec = spec
        self.proc: subprocess.Popen[bytes] | None = None
        self.pump: threading.Thread | None = None
        self.started = 0.0
        self.delay = policy.backoff_s
        self.restart_at: float | None = None
        self.quick_failures = 0
        self.starts = 0

    @property
    def alive(self) -> bool:
        return self.proc is not None and self.proc.poll() is None


class Supervisor:
    """Starts, watches and stops a table of child processes. Drive it from the main thread."""

    def __init__(self, policy: Policy | None = None, out: TextIO | None = None,
                 cwd: str | None = None) -> None:
        self.policy = policy or Policy()
        self.out = out or sys.stdout
        self.cwd = cwd
        self._children: dict[str, _Child] = {}
        self._write_lock = threading.Lock()
        self._width = 8
        self._preexec = _parent_death_signal()

    # -- what runs --------------------------------------------------------------------

    def add(self, spec: ChildSpec) -> None:
        """Start ``spec`` now and keep it running."""
        if spec.name in self._children:
            raise ValueError(f"a child named {spec.name!r} already exists")
        self._width = max(self._width, len(spec.name))
        child = _Child(spec, self.policy)
        self._children[spec.name] = child
        self._spawn(child)

    def reserve(self, names: Iterable[str]) -> None:
        """Size the name column for children added later, so the columns never shift."""
        self._width = max([self._width, *(len(n) for n in names)])

    def pid(self, name: str) -> int | None:
        child = self._children.get(name)
        return child.proc.pid if child is not None and child.alive and child.proc else None

    def alive(self, name: str) -> bool:
        child = self._children.get(name)
        return child is not None and child.alive

    def starts(self, name: str) -> int:
        """How many times ``name`` was started (1 + its restarts)."""
        return self._children[name].starts

    def say(self, text: str, name: str = "up") -> None:
        """Print a line with a name in front, like the children's lines."""
        with self._write_lock:
            self.out.write(f"{name:<{self._width}} | {text}\n")
            self.out.flush()

    # -- watching ---------------------------------------------------------------------

    def run(self, stop: threading.Event, on_tick: Callable[[], None] | None = None,
            tick_s: float = 0.1) -> None:
        """Watch the children until ``stop`` is set; raises :class:`MemqError` on giving up."""
        while not stop.is_set():
            self.poll()
            if on_tick is not None:
                on_tick()
            stop.wait(tick_s)

    def poll(self) -> None:
        """Notice exits, and restart the children whose backoff has run out."""
        now = time.monotonic()
        for child in list(self._children.values()):
            if child.proc is not None and child.proc.poll() is not None:
                self._exited(child, now)
            if child.restart_at is not None and now >= child.restart_at:
                child.restart_at = None
                self._spawn(child)

    def _exited(self, child: _Child, now: float) -> None:
        assert child.proc is not None
        code = child.proc.returncode
        self._reap(child)
        name = child.spec.name
        if not child.spec.restart:
            self.say(f"{name} finished (exit status {code})")
            return
        if now - child.started >= self.policy.stable_after_s:
            child.delay, child.quick_failures = self.policy.backoff_s, 0
        else:
            child.quick_failures += 1
        if child.quick_failures >= self.policy.max_quick_failures:
            raise MemqError(
                f"{name} exited {child.quick_failures} times in a row within "
                f"{self.policy.stable_after_s:g} s of starting (last exit status {code}); "
                "giving up: see its output above"
            )
        self.say(f"{name} exited with status {code}; restarting in {child.delay:.1f} s")
        child.restart_at = now + child.delay
        child.delay = min(self.policy.backoff_max_s, child.delay * 2)

    # -- stopping ---------------------------------------------------------------------

    def stop(self) -> None:
        """Stop every child, lowest ``stop_order`` first; returns when all are gone."""
        children = list(self._children.values())
        for child in children:
            child.restart_at = None  # nothing comes back while we stop
        for order in sorted({c.spec.stop_order for c in children}):
            self._stop_group([c for c in children if c.spec.stop_order == order and c.alive])

    def _stop_group(self, group: list[_Child]) -> None:
        for child in group:
            if child.spec.before_stop is not None:
                try:
                    child.spec.before_stop()
                except Exception as exc:  # a failed courtesy must not keep the rest running
                    self.say(f"before stopping {child.spec.name}: {exc}")
        for child in group:
            self.say(f"stopping {child.spec.name}")
            assert child.proc is not None
            child.proc.terminate()
        deadline = time.monotonic() + self.policy.stop_timeout_s
        for child in group:
            assert child.proc is not None
            try:
                child.proc.wait(max(0.0, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                self.say(f"{child.spec.name} did not stop within "
                         f"{self.policy.stop_timeout_s:g} s; killing it")
                child.proc.kill()
                child.proc.wait()
            code = child.proc.returncode
            self._reap(child)
            self.say(f"{child.spec.name} stopped (exit status {code})")

    # -- processes and their output ---------------------------------------------------

    def _spawn(self, child: _Child) -> None:
        spec = child.spec
        try:
            proc = subprocess.Popen(
                spec.argv, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                stderr=subprocess.STDOUT, env={**os.environ, **spec.env}, cwd=self.cwd,
                process_group=0, preexec_fn=self._preexec,
            )
        except OSError as exc:
            raise MemqError(f"cannot start {spec.name} ({spec.argv[0]}): {exc}") from exc
        child.proc, child.started = proc, time.monotonic()
        child.starts += 1
        assert proc.stdout is not None
        child.pump = threading.Thread(target=self._pump, args=(spec.name, proc.stdout),
                                      name=f"pump-{spec.name}", daemon=True)
        child.pump.start()
        self.say(f"started {spec.name} (pid {proc.pid})")

    def _pump(self, name: str, stream: IO[bytes]) -> None:
        for raw in iter(stream.readline, b""):
            self.say(raw.decode("utf-8", "replace").rstrip("\r\n"), name)
        stream.close()

    def _reap(self, child: _Child) -> None:
        if child.pump is not None:
            child.pump.join(5.0)  # the rest of its output, before we talk about its exit
        child.proc, child.pump = None, None


def _parent_death_signal() -> Callable[[], None] | None:
    """A ``preexec_fn`` asking the kernel for SIGTERM when the supervisor dies (Linux)."""
    if not sys.platform.startswith("linux"):
        return None
    try:
        prctl = ctypes.CDLL(None, use_errno=True).prctl
    except (OSError, AttributeError):
        return None

    def preexec() -> None:
        prctl(PR_SET_PDEATHSIG, int(signal.SIGTERM))

    return preexec
