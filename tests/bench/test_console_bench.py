"""bench/console.py runs end to end on a small database and prints every page's figures."""

from __future__ import annotations

import os
import re
import subprocess
import sys

import pytest

from tests.conftest import MODEL_DIR, ROOT

pytestmark = [pytest.mark.model, pytest.mark.slow, pytest.mark.redis]

PAGES = ("memory", "memory of a user", "session timeline", "why this context", "fact history",
         "approvals + check", "tasks", "rejected", "keys", "health")


def test_the_console_bench_prints_each_page_against_its_api_read() -> None:
    done = subprocess.run(
        [sys.executable, "bench/console.py", "--turns", "1200", "--calls", "5"],
        cwd=ROOT, env={**os.environ, "MEMQ_EMBED_MODEL_DIR": str(MODEL_DIR)},
        capture_output=True, text=True, timeout=300, check=False)
    assert done.returncode == 0, done.stderr[-2000:]
    assert "1200 turns in 2 sessions of 20 users in 2 tenants (built in" in done.stdout
    for page in PAGES:
        assert re.search(rf"{re.escape(page)} +page p50 +[\d.]+ ms +p95 +[\d.]+ ms +api p50 "
                         rf"+[\d.]+ ms p95 +[\d.]+ ms +page/api p50 x[\d.]+", done.stdout), page
