"""How a reading process uses the C heap (glibc's malloc), where large scopes leave marks.

A search of a large scope allocates and frees arrays of a few hundred KB to tens of MB a
call: scores for every row, the leaders' gathered blocks. glibc serves a block that large
from its own mapping (returned to the system when freed) only above a threshold that it
raises to the size of each such block freed, up to 32 MiB: after the first call, every
later one takes these arrays from the heap instead, between long-lived objects, and the
holes they leave are kept. A fresh reader at 100,119 turns grew 189-190 MiB serving 120
calls (78 MiB of vectors), of which 40-47 MiB went back on ``malloc_trim``.

Elsewhere than glibc (macOS, musl) both functions do nothing.
"""

from __future__ import annotations

import ctypes
import threading
from collections.abc import Callable

LARGE_BLOCK = 1 << 20
"""Blocks from this size on are mapped on their own, whatever was freed before (unless a
free block of the heap can serve them: glibc maps only what would grow the heap). A fresh
reader at 100,119 turns grew 151-153 MiB serving 120 calls at 1 MiB, 156-161 at 4 MiB,
182-190 without; at 1,000,158 turns 1,135 MiB against 1,164 (60 calls). In calls
alternated in one process at 100,119 turns, 400 a side: p50 20.80 / 20.69 / 20.85 ms at
1 MiB / 4 MiB / 32 MiB (glibc's own ceiling), p95 30.7 / 31.7 / 33.5."""

_M_MMAP_THRESHOLD = -3  # from glibc's malloc.h
_policy_set = threading.Lock()
_done = False


def _glibc(name: str) -> Callable[..., int] | None:
    try:
        return getattr(ctypes.CDLL(None), name)  # type: ignore[no-any-return]
    except (OSError, AttributeError):  # not glibc: nothing to call
        return None


_MALLOPT = _glibc("mallopt")
_MALLOC_TRIM = _glibc("malloc_trim")


def map_large_blocks_apart() -> None:
    """Keep glibc's threshold for mapped blocks at :data:`LARGE_BLOCK` in this process,
    once (a process-wide setting: every block that large, whoever allocates it)."""
    global _done
    with _policy_set:
        if not _done and _MALLOPT is not None:
            _MALLOPT(_M_MMAP_THRESHOLD, LARGE_BLOCK)
        _done = True


def give_back_freed_memory() -> None:
    """Return to the system what loading a large scope freed. Its temporaries (each chunk's
    blobs, its keys' gathers) leave glibc's heap in holes between the cache's own objects,
    which it keeps: a fresh reader grew 270 MiB loading 100,119 turns (78 MiB of vectors)
    and answering 20 questions, 177 MiB with this and the index's fit in chunks
    (bench/context.py --realistic). Once per large load; it takes milliseconds."""
    if _MALLOC_TRIM is not None:
        _MALLOC_TRIM(0)
