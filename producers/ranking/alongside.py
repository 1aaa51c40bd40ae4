"""Run one read on another thread while the caller does its own, when a thread is free.

The ``recall`` profile's two kinds of evidence are independent until they are fused: the
lexical search is SQLite's (FTS5 and BM25 in C, run by apsw with the GIL released) and
the semantic one numpy's (which releases it too), so each can take a core. At 100,000
turns of one user each took ~13 ms of a ~40 ms ``get_context``, one after the other
(bench/context.py --realistic).

A process has :data:`THREADS` such threads. When every one is busy (a server answering
many calls at once, whose cores are taken anyway) the read runs on the caller's thread
as before, so a call never waits in a queue for a thread it could do without.
"""

from __future__ import annotations

import os
import threading
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor
from typing import TypeVar

T = TypeVar("T")

THREADS = 4
"""Reads running alongside their callers at once, per process."""

_guard = threading.Lock()
_pool: tuple[int, ThreadPoolExecutor, threading.BoundedSemaphore] | None = None


def start(read: Callable[[], T]) -> Future[T]:
    """``read()``'s result to come: on a thread of its own if one is free, else run now."""
    pool, free = _threads()
    if not free.acquire(blocking=False):
        return _done(read)

    def freeing() -> T:
        try:
            return read()
        finally:  # before the result is out: whoever has it finds the thread free
            free.release()

    try:
        return pool.submit(freeing)
    except BaseException:
        free.release()
        raise


def _done(read: Callable[[], T]) -> Future[T]:
    future: Future[T] = Future()
    try:
        future.set_result(read())
    except Exception as exc:
        future.set_exception(exc)
    return future


def _threads() -> tuple[ThreadPoolExecutor, threading.BoundedSemaphore]:
    """This process's threads: made on first use, and again in a forked child (whose copy
    of the parent's pool has no threads behind it)."""
    global _pool
    with _guard:
        if _pool is None or _pool[0] != os.getpid():
            _pool = (os.getpid(), ThreadPoolExecutor(THREADS, "memq-read"),
                     threading.BoundedSemaphore(THREADS))
        return _pool[1], _pool[2]
