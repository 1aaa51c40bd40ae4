"""Shared benchmark plumbing: a private redis-server, a scratch directory, percentiles."""

from __future__ import annotations

import contextlib
import shutil
import socket
import subprocess
import tempfile
import time
from collections.abc import Iterator, Sequence
from pathlib import Path

import redis


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


@contextlib.contextmanager
def private_redis() -> Iterator[str]:
    """A throwaway redis-server on a free port; yields its URL."""
    binary = shutil.which("redis-server")
    if binary is None:
        raise SystemExit("redis-server is not installed: run `make bootstrap` first")
    port = free_port()
    with tempfile.TemporaryDirectory(prefix="memq-bench-redis-") as tmp:
        proc = subprocess.Popen(
            [binary, "--port", str(port), "--bind", "127.0.0.1", "--save", "",
             "--appendonly", "no", "--dir", tmp],
            stdout=subprocess.DEVNULL,
        )
        try:
            client = redis.Redis(port=port)
            for _ in range(200):
                with contextlib.suppress(redis.ConnectionError):
                    client.ping()
                    break
                time.sleep(0.02)
            yield f"redis://127.0.0.1:{port}/0"
        finally:
            proc.terminate()
            proc.wait(10)


@contextlib.contextmanager
def scratch_dir() -> Iterator[Path]:
    with tempfile.TemporaryDirectory(prefix="memq-bench-") as tmp:
        yield Path(tmp)


def percentile(values: Sequence[float], q: float) -> float:
    ordered = sorted(values)
    if not ordered:
        return float("nan")
    index = min(len(ordered) - 1, max(0, round(q / 100 * (len(ordered) - 1))))
    return ordered[index]


def percentiles_ms(seconds: Sequence[float]) -> tuple[float, float]:
    """p50 and p95 of ``seconds``, in milliseconds, interpolated as numpy does."""
    import numpy as np  # here: a bench sets its BLAS threads before numpy loads

    ms = np.asarray(seconds) * 1000
    return float(np.percentile(ms, 50)), float(np.percentile(ms, 95))


def memory_kib(field: str) -> int:
    """A ``/proc/self/status`` figure in KiB (``VmRSS``, ``VmHWM``, ``RssAnon``); 0 where
    there is none. A reader maps the database (store/connection.py): the pages it read
    count in ``VmRSS`` as the kernel's shared file cache, in ``RssAnon`` they do not."""
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith(field + ":"):
            return int(line.split()[1])
    return 0


SAMPLE_TEXTS = (
    "Can you check whether the deploy to staging finished and tell me which tests failed?",
    "The build failed on test_payments because the fixture expects EUR but the config says USD.",
    "I booked the flight to Lisbon for March 5th, landing at 14:20; hotel is near Alfama.",
    "Let's move the weekly sync to Thursdays at 3pm, Maria can't make Mondays anymore.",
    "Here is the stack trace: KeyError 'user_id' in handlers/session.py line 88.",
    "Remind me to renew the TLS certificate before it expires on the 12th.",
    "Summarise the last three customer emails about the refund delays, please.",
    "Running `git status` shows two modified files: api/routes.py and tests/test_routes.py.",
)


def chat_text(i: int) -> str:
    """Realistic chat-length text (60-120 characters), varied so nothing is deduplicated."""
    return f"{SAMPLE_TEXTS[i % len(SAMPLE_TEXTS)]} (turn {i})"
