"""bench/adapters.py runs on a small workload and prints each adapter against its client call."""

from __future__ import annotations

import re
import subprocess
import sys

import pytest

from tests.conftest import ROOT

pytestmark = [pytest.mark.slow, pytest.mark.redis]

CALLS = ("langchain add_messages", "langchain messages", "openai-agents add_items",
         "openai-agents get_items", "langgraph put", "langgraph get", "langgraph search",
         "mcp recall (in process)", "mcp recall, a new question")
FLOORED = ("langchain messages", "langgraph get", "mcp recall (in process)",
           "mcp recall, a new question")


def test_the_adapters_bench_prints_each_pair_with_its_ratio() -> None:
    done = subprocess.run([sys.executable, "bench/adapters.py", "--calls", "6", "--turns", "6",
                           "--pop-turns", "5,20", "--pops", "2"],
                          cwd=ROOT, capture_output=True, text=True, timeout=300, check=False)
    assert done.returncode == 0, done.stderr[-2000:]
    for name in CALLS:
        assert re.search(rf"{re.escape(name)} +[\d.]+ +[\d.]+ +([\d.]+ +)?x[\d.]+",
                         done.stdout), name
    for name in FLOORED:  # the framework's own floor, and what the adapter adds beyond it
        assert re.search(rf"{re.escape(name)} +[\d.]+ +[\d.]+ +[\d.]+ +x[\d.]+ +x-?[\d.]+",
                         done.stdout), name
    # pop_item keeps the other turns' ids; the former pop sent them again under new ones.
    for turns in (5, 20):
        assert re.search(rf"^ +{turns} +[\d.]+ +[\d.]+  x[\d.]+  {turns - 2}/{turns - 2} / "
                         rf"0/{turns - 2}$", done.stdout, re.MULTILINE), done.stdout
