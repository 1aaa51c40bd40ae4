"""A module that forged jobs name: any trace of it running is a hole.

Importing it or calling anything in it leaves a file in ``$MEMQ_TEST_CANARY_DIR``; the
forged-job tests assert that the directory stays empty. No memq code imports it.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any


def _touch(what: str) -> None:
    directory = os.environ.get("MEMQ_TEST_CANARY_DIR")
    if directory:
        (Path(directory) / what).touch()


_touch("imported")


def called(*args: Any, **kwargs: Any) -> None:
    _touch("called")


class Queue:
    """Named as a queue class in a forged scheduled job's meta."""

    @classmethod
    def from_queue_key(cls, *args: Any, **kwargs: Any) -> None:
        _touch("queue-class-used")


class Evil:
    """Pickled into job payloads: unpickling it would call :func:`called`."""

    def __reduce__(self) -> tuple[Any, tuple[()]]:
        return (called, ())
