"""The reader's heap policy: large temporaries are mapped apart from the heap."""

from __future__ import annotations

import subprocess
import sys
import textwrap

import pytest

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"),
                                reason="glibc's heap, read from /proc/self/maps")

# In a process of its own: in a long-lived one the heap may hold a free block large
# enough, which glibc hands out whatever the threshold (it maps apart only what the heap
# cannot serve), so what this checks would depend on the tests run before.
_PROBE = textwrap.dedent("""
    import sys
    from pathlib import Path
    import numpy as np
    from memq.store.read import heap
    if sys.argv[1] == "policy":
        heap.map_large_blocks_apart()
    big = np.ones(4 << 20, dtype=np.float32)  # 16 MB, mapped apart either way
    del big  # without the policy, glibc's threshold rises to 16 MB here
    again = np.ones(512 << 10, dtype=np.float32)  # 2 MB, past LARGE_BLOCK
    for line in Path("/proc/self/maps").read_text().splitlines():
        if line.endswith("[heap]"):
            low, high = (int(x, 16) for x in line.split()[0].split("-"))
            print(low <= again.ctypes.data < high)
            break
    else:
        print(False)
""")


def _in_heap(mode: str) -> bool:
    done = subprocess.run([sys.executable, "-c", _PROBE, mode], capture_output=True,
                          text=True, check=True)
    return done.stdout.strip() == "True"


def test_a_large_temporary_is_mapped_apart_even_after_a_larger_one_was_freed() -> None:
    """glibc would otherwise raise its threshold to the 16 MB block freed and take the next
    2 MB from the heap, where the hole it leaves stays."""
    assert _in_heap("none")  # what the policy changes: without it, the heap
    assert not _in_heap("policy")
