"""One thread that runs the writer's Redis-only follow-ups in order, off its own thread.

Enqueueing a batch's embed jobs costs a few milliseconds of Redis round trips; on the
writer's thread that time is added to every batch's commit lag and taken from ingest. A
follow-up that reads the database must not come here: the writer's connection belongs to
its own thread, inside a transaction most of the time.

Losing a follow-up is allowed (the writer's reconcile pass repairs a missing job), so one
that fails is logged and the next one runs. :meth:`Background.submit` blocks once
``max_pending`` calls wait: a slow Redis slows the writer instead of filling memory.
"""

from __future__ import annotations

import logging
import queue
import threading
from collections.abc import Callable

logger = logging.getLogger("memq.writer")

Call = Callable[[], None]


class Background:
    def __init__(self, name: str, max_pending: int = 8) -> None:
        self._calls: queue.Queue[Call | None] = queue.Queue(maxsize=max_pending)
        self._thread = threading.Thread(target=self._run, name=name, daemon=True)
        self._thread.start()

    def submit(self, call: Call) -> None:
        self._calls.put(call)

    def is_alive(self) -> bool:
        return self._thread.is_alive()

    def wait(self) -> None:
        """Return once every call submitted so far has run."""
        self._calls.join()

    def close(self) -> None:
        """Run what is pending, then stop the thread."""
        if self._thread.is_alive():
            self._calls.put(None)
            self._thread.join()

    def _run(self) -> None:
        while True:
            call = self._calls.get()
            try:
                if call is None:
                    return
                call()
            except Exception:  # a bug in a follow-up must not stop the ones after it
                logger.exception("a background follow-up failed")
            finally:
                self._calls.task_done()
