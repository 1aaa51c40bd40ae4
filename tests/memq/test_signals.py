"""Stopping on a signal never hangs: the event is set on a thread of its own, not inside a
handler that may have interrupted the event's own lock (``memq up`` hung on Ctrl-C)."""

from __future__ import annotations

import signal
import subprocess
import sys
import textwrap

from tests.conftest import ROOT

HAMMER = textwrap.dedent("""
    import sys, threading
    from memq.signals import stop_on_signals
    stop = stop_on_signals()
    print("ready", flush=True)
    while not stop.is_set():
        stop.wait(0)          # in and out of the event's lock, as fast as it goes
    print("stopped", flush=True)
""")


def test_a_signal_that_lands_inside_the_events_lock_still_stops() -> None:
    """With ``signal.signal(sig, lambda *_: stop.set())`` some of these runs never end."""
    for _ in range(20):
        proc = subprocess.Popen([sys.executable, "-c", HAMMER], cwd=ROOT, text=True,
                                stdout=subprocess.PIPE)
        assert proc.stdout is not None
        assert proc.stdout.readline().strip() == "ready"
        proc.send_signal(signal.SIGTERM)
        try:
            out, _ = proc.communicate(timeout=10)
        finally:
            proc.kill()
        assert (proc.returncode, out.strip()) == (0, "stopped")
