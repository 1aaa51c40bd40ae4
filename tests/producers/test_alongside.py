"""Reads run alongside their caller when a thread is free, on the caller's thread when not;
either way the caller gets the read's result or its error (producers/ranking/alongside.py)."""

from __future__ import annotations

import os
import select
import signal
import threading
from collections.abc import Iterator

import pytest

from memq.producers.ranking import alongside


@pytest.fixture
def busy() -> Iterator[threading.Event]:
    """Every thread of the pool held by a read that waits for the event, then let go."""
    release = threading.Event()
    started = [threading.Event() for _ in range(alongside.THREADS)]
    held = [alongside.start(lambda s=s: s.set() or release.wait(30)) for s in started]
    for s in started:
        assert s.wait(10)
    yield release
    release.set()
    for future in held:
        future.result(timeout=10)


def test_a_read_runs_on_a_thread_of_its_own() -> None:
    future = alongside.start(threading.get_ident)
    assert future.result(timeout=10) != threading.get_ident()


def test_a_read_waits_for_no_thread_when_every_one_is_busy(busy: threading.Event) -> None:
    future = alongside.start(threading.get_ident)
    assert future.done()  # ran before start returned: no queue behind the busy reads
    assert future.result() == threading.get_ident()


def test_the_threads_are_free_again_once_their_reads_end() -> None:
    for _ in range(3 * alongside.THREADS):  # more reads than threads, one after another
        assert alongside.start(threading.get_ident).result(timeout=10) != threading.get_ident()


class Refused(Exception):
    pass


def refuse() -> None:
    raise Refused("the read failed")


def test_the_reads_error_reaches_the_caller_from_a_thread() -> None:
    with pytest.raises(Refused, match="the read failed"):
        alongside.start(refuse).result(timeout=10)


def test_the_reads_error_reaches_the_caller_when_it_ran_in_place(
        busy: threading.Event) -> None:
    future = alongside.start(refuse)
    assert future.done()
    with pytest.raises(Refused, match="the read failed"):
        future.result()


@pytest.mark.skipif(not hasattr(os, "fork"), reason="fork")
def test_a_forked_child_gets_threads_of_its_own() -> None:
    """The parent's pool was copied without its threads: a read there would never run."""
    alongside.start(int).result(timeout=10)  # the parent's pool exists
    read, write = os.pipe()
    ready: list[int] = []
    child = os.fork()
    if child == 0:  # pragma: no cover - the child reports through the pipe
        try:
            ok = alongside.start(threading.get_ident).result(timeout=10) != threading.get_ident()
            os.write(write, b"1" if ok else b"0")
        finally:
            os._exit(0)
    os.close(write)
    try:
        ready, _, _ = select.select([read], [], [], 30)
        assert ready, "the child's read never ran"
        assert os.read(read, 1) == b"1"
    finally:
        os.close(read)
        if not ready:
            os.kill(child, signal.SIGKILL)
        os.waitpid(child, 0)
