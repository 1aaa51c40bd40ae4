"""The reader's heap policy: large temporaries are mapped apart from the heap."""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import pytest

from memq.store.read import heap

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"),
                                reason="glibc's heap, read from /proc/self/maps")


def _heap_range() -> tuple[int, int]:
    for line in Path("/proc/self/maps").read_text().splitlines():
        if line.endswith("[heap]"):
            low, high = line.split()[0].split("-")
            return int(low, 16), int(high, 16)
    return 0, 0


def test_a_large_temporary_is_mapped_apart_even_after_a_larger_one_was_freed() -> None:
    """glibc would otherwise raise its threshold to the 16 MB block freed and take the next
    2 MB from the heap, where the hole it leaves stays."""
    heap.map_large_blocks_apart()
    big = np.ones(4 << 20, dtype=np.float32)
    del big
    again = np.ones(512 << 10, dtype=np.float32)  # 2 MB, past LARGE_BLOCK
    low, high = _heap_range()
    assert not low <= again.ctypes.data < high

