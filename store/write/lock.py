"""The single-writer guarantee: an exclusive ``flock`` beside the database file.

The kernel drops the lock when the process dies, however it dies, so a killed writer
never leaves a stale lock behind.
"""

from __future__ import annotations

import fcntl
import os
from pathlib import Path

from memq.errors import StoreError, WriterAlreadyRunning


class WriterLock:
    """The lock; ``doing`` names a command that needs the writer stopped (``"rebuild"``),
    so that its refusal tells the person what to do."""

    def __init__(self, db_path: str | os.PathLike[str], *, doing: str | None = None) -> None:
        self.path = Path(f"{db_path}.writer.lock")
        self.doing = doing
        self._fd: int | None = None

    def acquire(self) -> None:
        try:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            fd = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o600)
        except (OSError, ValueError) as exc:  # ValueError: a NUL in the path
            raise StoreError(f"cannot lock the database {str(self.path)[:-12]}: {exc}") from exc
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            holder = os.read(fd, 32).decode(errors="replace").strip() or "unknown"
            os.close(fd)
            database = str(self.path)[:-12]
            if self.doing is not None:
                raise WriterAlreadyRunning(
                    f"the writer (pid {holder}) is running on {database}: stop the writer "
                    f"first, then {self.doing}") from None
            raise WriterAlreadyRunning(
                f"another writer (pid {holder}) already owns {database}") from None
        os.ftruncate(fd, 0)
        os.write(fd, str(os.getpid()).encode())
        self._fd = fd

    def release(self) -> None:
        if self._fd is not None:
            os.close(self._fd)  # closing the descriptor releases the flock
            self._fd = None

    def __enter__(self) -> WriterLock:
        self.acquire()
        return self

    def __exit__(self, *exc: object) -> None:
        self.release()
