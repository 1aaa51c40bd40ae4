"""Stopping on SIGTERM and SIGINT without setting a ``threading.Event`` inside a handler.

A Python signal handler runs on the main thread, between two of its bytecodes: in the
middle of ``stop.wait()`` too, with the event's lock held. A handler that calls
``stop.set()`` then waits for that same lock, held by the code it interrupted: the process
hangs for good (``memq up`` was seen to, on Ctrl-C, now and then). So the handler does
nothing; the signal's number reaches a pipe (``signal.set_wakeup_fd``, written in C), and
a thread of its own reads it and sets the event.
"""

from __future__ import annotations

import os
import signal
import threading

STOP_SIGNALS = (signal.SIGTERM, signal.SIGINT)


def stop_on_signals(stop: threading.Event | None = None) -> threading.Event:
    """An event that SIGTERM or SIGINT sets (they no longer end the process); call it from
    the main thread, once per process."""
    stop = threading.Event() if stop is None else stop
    read_end, write_end = os.pipe()
    os.set_blocking(write_end, False)
    signal.set_wakeup_fd(write_end, warn_on_full_buffer=False)
    for sig in STOP_SIGNALS:
        signal.signal(sig, _ignore)
    threading.Thread(target=_watch, args=(read_end, stop), name="memq-signals",
                     daemon=True).start()
    return stop


def _ignore(signum: int, frame: object) -> None:
    """The Python-level handler: the number already went down the pipe."""


def _watch(read_end: int, stop: threading.Event) -> None:
    wanted = {int(sig) for sig in STOP_SIGNALS}
    while True:
        received = os.read(read_end, 64)
        if not received:
            return
        if wanted & set(received):
            stop.set()
