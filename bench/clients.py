"""What making a client of ``memq serve`` costs: with the TLS context every client shares
(``memq.tls``), against a context built for each client, as httpx does for
``verify=True`` and as memq did before. Both in the same run, alternated, CPU and wall.

No server is needed: a client connects on its first call, and making one is what an agent
backend pays for each client it makes (one per request, in some).

    .venv/bin/python bench/clients.py [--clients 200]
"""

from __future__ import annotations

import argparse
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import httpx

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from memq import RemoteMemoryClient

URL = "http://127.0.0.1:8420"


def timed(make: Callable[[], Any]) -> tuple[float, float]:
    """Wall and CPU seconds of making (and closing) one client."""
    wall, cpu = time.perf_counter(), time.process_time()
    make().close()
    return time.perf_counter() - wall, time.process_time() - cpu


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--clients", type=int, default=200)
    args = parser.parse_args(argv)
    if args.clients < 1:
        parser.error("--clients must be at least 1")
    ways: dict[str, Callable[[], Any]] = {
        "shared context": lambda: RemoteMemoryClient(URL, token="t"),
        "a context each (before)": lambda: RemoteMemoryClient(
            URL, token="t", verify=httpx.create_ssl_context()),
    }
    figures: dict[str, list[tuple[float, float]]] = {name: [] for name in ways}
    for _ in range(args.clients):
        for name, make in ways.items():
            figures[name].append(timed(make))
    print(f"{args.clients} clients each way, alternated")
    mean = {name: [sum(f[k] for f in fs) / len(fs) * 1000 for k in (0, 1)]
            for name, fs in figures.items()}
    for name, (wall, cpu) in mean.items():
        print(f"{name:<24} wall {wall:7.3f} ms  CPU {cpu:7.3f} ms per client")
    (shared, _), (each, _) = mean.values()
    print(f"a context each / shared: {each / shared:.0f}x the wall time per client")
    return 0


if __name__ == "__main__":
    sys.exit(main())
