"""The WAL's checkpoints, run beside the writer's commits rather than inside one of them.

SQLite's automatic checkpoint runs inside the commit that brings the WAL to
``wal_autocheckpoint`` pages: that commit copies the WAL's pages into the database file
and syncs it (16 MB at 1,000 pages of 16 KiB) before it returns, every second or two under
a flood of appends, and the turns of every key in that batch wait for it
(bench/fairness.py). Here the writer's connection never checkpoints: its WAL hook, which
SQLite calls after each commit with the WAL's size, wakes a thread with a connection of
its own that runs the same PASSIVE checkpoint while the writer goes on committing. A
passive checkpoint neither waits for nor blocks readers and writers, so replication
(Litestream, which checkpoints too) and backups keep working as they did.
"""

from __future__ import annotations

import logging
import threading

import apsw

from memq.logs import log
from memq.store.connection import CHECKPOINT_PAGES, open_connection

logger = logging.getLogger("memq.writer")


class Checkpoints:
    """The thread that checkpoints ``writer``'s database; :meth:`close` before the writer's
    connection closes."""

    def __init__(self, writer: apsw.Connection, pages: int = CHECKPOINT_PAGES) -> None:
        self.pages = pages
        self._writer = writer
        self.last: tuple[int, int] | None = None
        """What the last checkpoint saw: the WAL's pages, and how many are now in the file."""
        self._conn = open_connection(writer.filename)
        self._due = threading.Event()
        self._stopping = False
        self._done = threading.Condition()
        self.runs = 0
        self._thread = threading.Thread(target=self._run, name="memq-checkpoints", daemon=True)
        self._thread.start()
        # Replaces SQLite's automatic checkpoint on this connection (its WAL hook too).
        writer.set_wal_hook(self._committed)

    def _committed(self, _conn: apsw.Connection, _name: str, pages: int) -> int:
        if pages >= self.pages:
            self._due.set()
        return apsw.SQLITE_OK

    def wait(self, runs: int, timeout: float) -> bool:
        """Whether ``runs`` checkpoints have run (waiting up to ``timeout`` seconds)."""
        with self._done:
            return self._done.wait_for(lambda: self.runs >= runs, timeout)

    def close(self) -> None:
        """Stop the thread (a checkpoint in progress finishes) and close its connection; the
        writer's connection checkpoints itself again."""
        self._writer.pragma("wal_autocheckpoint", CHECKPOINT_PAGES)
        self._stopping = True
        self._due.set()
        self._thread.join()
        self._conn.close()

    def _run(self) -> None:
        while True:
            self._due.wait()
            self._due.clear()
            if self._stopping:
                return
            try:
                last = self._conn.wal_checkpoint(mode=apsw.SQLITE_CHECKPOINT_PASSIVE)
            except apsw.BusyError as exc:  # another one checkpoints: the next commit retries
                log(logger, "checkpoint skipped", level=logging.DEBUG, reason=str(exc))
                continue
            except Exception:  # the thread must outlive a failure: nothing else checkpoints
                logger.exception("a checkpoint of the WAL failed")
                continue
            with self._done:
                self.last, self.runs = last, self.runs + 1
                self._done.notify_all()
