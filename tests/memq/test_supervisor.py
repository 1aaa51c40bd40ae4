"""The supervisor with real child processes: prefixes, restarts, backoff, ordered stop."""

from __future__ import annotations

import io
import os
import signal
import subprocess
import sys
import textwrap
import threading
import time
from pathlib import Path

import pytest

from memq.errors import MemqError
from memq.supervisor import ChildSpec, Policy, Supervisor
from tests.conftest import ROOT

FAST = Policy(backoff_s=0.05, backoff_max_s=0.4, stable_after_s=60.0, max_quick_failures=50,
              stop_timeout_s=20.0)


def py(code: str) -> tuple[str, ...]:
    return (sys.executable, "-c", textwrap.dedent(code))


def pid_alive(pid: int) -> bool:
    """True while ``pid`` runs (a zombie waiting to be reaped counts as gone)."""
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except (FileNotFoundError, ProcessLookupError):
        return False
    return state != "Z"


def wait_for(condition, what: str, supervisor: Supervisor | None = None, limit: float = 30.0):
    """Poll ``condition`` (driving the supervisor meanwhile); fail with ``what`` if never."""
    deadline = time.monotonic() + limit
    while time.monotonic() < deadline:
        if supervisor is not None:
            supervisor.poll()
        if condition():
            return
        time.sleep(0.02)
    pytest.fail(f"timed out waiting for {what}")


@pytest.fixture
def out() -> io.StringIO:
    return io.StringIO()


@pytest.fixture
def supervisor(out: io.StringIO):
    sup = Supervisor(FAST, out=out)
    yield sup
    sup.stop()


# A child that says it is ready, writes "<name> stopped" to a file on SIGTERM, and exits.
POLITE = """
import signal, sys, time
def bye(*_):
    with open({log!r}, "a") as fh:
        fh.write({name!r} + " stopped\\n")
    sys.exit(0)
signal.signal(signal.SIGTERM, bye)
print("ready", flush=True)
while True:
    time.sleep(0.05)
"""


def polite(name: str, log: Path, order: int, **kw) -> ChildSpec:
    return ChildSpec(name, py(POLITE.format(log=str(log), name=name)), order, **kw)


def test_child_lines_carry_its_name(supervisor: Supervisor, out: io.StringIO) -> None:
    supervisor.reserve(["a-long-name"])
    supervisor.add(ChildSpec("talker", py("print('one'); print('two')"), restart=False))
    wait_for(lambda: "talker finished" in out.getvalue(), "the one-shot to finish", supervisor)
    lines = out.getvalue().splitlines()
    assert "talker      | one" in lines
    assert "talker      | two" in lines
    assert "up          | talker finished (exit status 0)" in lines
    assert supervisor.starts("talker") == 1  # a one-shot is not restarted


def test_crashed_child_is_restarted_with_growing_backoff(
    supervisor: Supervisor, out: io.StringIO
) -> None:
    supervisor.add(ChildSpec("crasher", py("import sys; sys.exit(3)")))
    wait_for(lambda: supervisor.starts("crasher") >= 5, "four restarts", supervisor)
    text = out.getvalue()
    delays = [line.rsplit("restarting in ", 1)[1] for line in text.splitlines()
              if "crasher exited with status 3" in line]
    assert delays[:4] == ["0.1 s", "0.1 s", "0.2 s", "0.4 s"]  # 0.05 doubles, capped at 0.4


def test_backoff_starts_over_after_a_stable_run(out: io.StringIO) -> None:
    sup = Supervisor(Policy(backoff_s=0.2, stable_after_s=0.0), out=out)
    try:
        sup.add(ChildSpec("flaky", py("import sys; sys.exit(1)")))
        wait_for(lambda: sup.starts("flaky") >= 3, "two restarts", sup)
    finally:
        sup.stop()
    delays = [line.rsplit("restarting in ", 1)[1] for line in out.getvalue().splitlines()
              if "flaky exited" in line]
    assert delays[:2] == ["0.2 s", "0.2 s"]


def test_a_child_that_keeps_failing_makes_it_give_up(out: io.StringIO) -> None:
    sup = Supervisor(Policy(backoff_s=0.01, max_quick_failures=3), out=out)
    try:
        sup.add(ChildSpec("broken", py("import sys; print('bad config'); sys.exit(1)")))
        with pytest.raises(MemqError, match=r"broken exited 3 times in a row .* status 1"):
            wait_for(lambda: False, "the supervisor to give up", sup)
    finally:
        sup.stop()
    assert "broken   | bad config" in out.getvalue()


def test_killed_child_is_restarted(supervisor: Supervisor, tmp_path: Path,
                                   out: io.StringIO) -> None:
    supervisor.add(polite("worker", tmp_path / "log", 0))
    wait_for(lambda: "worker   | ready" in out.getvalue(), "the worker to start", supervisor)
    first = supervisor.pid("worker")
    assert first is not None
    os.kill(first, signal.SIGKILL)
    wait_for(lambda: supervisor.starts("worker") == 2 and supervisor.alive("worker"),
             "the restart", supervisor)
    assert supervisor.pid("worker") != first
    assert "worker exited with status -9; restarting in 0.1 s" in out.getvalue()


def test_stop_goes_by_order_and_runs_before_stop_first(
    supervisor: Supervisor, tmp_path: Path, out: io.StringIO
) -> None:
    log = tmp_path / "log"

    def drained() -> None:
        with log.open("a") as fh:
            fh.write("writer drained\n")

    supervisor.add(polite("redis", log, 2))
    supervisor.add(polite("writer", log, 1, before_stop=drained))
    supervisor.add(polite("embed", log, 0))
    supervisor.add(polite("tasks", log, 0))
    wait_for(lambda: out.getvalue().count("| ready") == 4, "every child to start", supervisor)
    pids = [supervisor.pid(n) for n in ("redis", "writer", "embed", "tasks")]
    supervisor.stop()
    lines = log.read_text().splitlines()
    assert sorted(lines[:2]) == ["embed stopped", "tasks stopped"]
    assert lines[2:] == ["writer drained", "writer stopped", "redis stopped"]
    assert not any(pid_alive(pid) for pid in pids if pid is not None)


def test_child_that_ignores_sigterm_is_killed(out: io.StringIO) -> None:
    sup = Supervisor(Policy(stop_timeout_s=0.5), out=out)
    stubborn = "import signal, time\nsignal.signal(signal.SIGTERM, signal.SIG_IGN)\n" \
               "print('ready', flush=True)\nwhile True: time.sleep(1)"
    sup.add(ChildSpec("stubborn", py(stubborn)))
    wait_for(lambda: "stubborn | ready" in out.getvalue(), "the child to start", sup)
    pid = sup.pid("stubborn")
    sup.stop()
    assert "stubborn did not stop within 0.5 s; killing it" in out.getvalue()
    assert pid is not None
    assert not pid_alive(pid)


def test_children_are_not_in_the_terminal_process_group(
    supervisor: Supervisor, tmp_path: Path, out: io.StringIO
) -> None:
    # Ctrl-C signals the terminal's foreground group; children must not get it directly.
    supervisor.add(polite("child", tmp_path / "log", 0))
    wait_for(lambda: "child    | ready" in out.getvalue(), "the child to start", supervisor)
    pid = supervisor.pid("child")
    assert pid is not None
    assert os.getpgid(pid) == pid != os.getpgid(0)


def test_bad_command_is_a_clear_error(supervisor: Supervisor) -> None:
    with pytest.raises(MemqError, match=r"cannot start ghost \(/nonexistent/binary\)"):
        supervisor.add(ChildSpec("ghost", ("/nonexistent/binary",)))


def test_duplicate_name_is_refused(supervisor: Supervisor) -> None:
    supervisor.add(ChildSpec("once", py("pass"), restart=False))
    with pytest.raises(ValueError, match="already exists"):
        supervisor.add(ChildSpec("once", py("pass")))


SUPERVISOR_SCRIPT = """
import sys, time, threading
from memq.supervisor import ChildSpec, Supervisor
sup = Supervisor()
sup.add(ChildSpec("sleeper", (sys.executable, "-c", "import time; time.sleep(600)")))
print("child", sup.pid("sleeper"), flush=True)
time.sleep(600)
"""


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="PR_SET_PDEATHSIG is Linux")
def test_children_die_with_a_killed_supervisor() -> None:
    proc = subprocess.Popen([sys.executable, "-c", SUPERVISOR_SCRIPT], cwd=ROOT,
                            stdout=subprocess.PIPE, text=True,
                            env={**os.environ, "PYTHONPATH": str(ROOT)})
    try:
        child = 0
        assert proc.stdout is not None
        for line in proc.stdout:
            if line.startswith("child "):
                child = int(line.split()[1])
                break
        assert pid_alive(child)
        proc.kill()
        proc.wait()
        done = threading.Event()
        deadline = time.monotonic() + 10
        while pid_alive(child) and time.monotonic() < deadline:
            done.wait(0.02)
        assert not pid_alive(child)
    finally:
        proc.kill()
        proc.wait()
