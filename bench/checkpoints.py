"""The writer's batches under a flood of appends: the WAL checkpointed by a thread of its own
(store/write/checkpoints.py) against SQLite's checkpoint inside a commit, in one run.

    .venv/bin/python bench/checkpoints.py [--batches 1500] [--rounds 3]

Each round applies ``--batches`` batches of one key's turns (as many as the keys' relay
keeps in flight, a third of them tool outputs of 2-8 KB, as bench/fairness.py's flooding
key sends them) through the writer's own batch code (``memq.testing.apply_events``, without
Redis) to a fresh database: once as the writer runs, and once with its checkpoint thread
closed, so SQLite checkpoints inside the commit that brings the WAL to 1,000 pages, as the
writer did before. Printed per round and way: each batch's time (applied and committed)
at p50, p99, p99.9 and the slowest, and the batches over 25 ms; then the ratios of the
thread's figures to the commit's, median of the rounds.
"""

from __future__ import annotations

import argparse
import random
import statistics
import sys
import time
from pathlib import Path

import numpy as np
import redis

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.common import scratch_dir
from bench.fairness import a_turns
from memq.clock import now_rfc3339, uuid7
from memq.config import Config
from memq.events import Event, EventType
from memq.store.write.relay import IN_FLIGHT
from memq.store.write.writer import Writer
from memq.testing import apply_events

WAYS = ("thread", "in commit")
SLOW_MS = 25.0


def batch_times(path: Path, batches: int, way: str) -> np.ndarray:
    """Milliseconds each batch took, applied to a new database at ``path``."""
    writer = Writer.open(Config(db_path=str(path)), redis.Redis())
    if way == "in commit" and writer.checkpoints is not None:
        writer.checkpoints.close()  # SQLite's automatic checkpoint again
    rng, times = random.Random(7), []
    try:
        for b in range(batches):
            turns = a_turns("flood", range(b * IN_FLIGHT, (b + 1) * IN_FLIGHT), rng)
            events: list[Event | bytes] = [
                Event(uuid7(), EventType.MESSAGE_APPENDED, t["session_id"], now_rfc3339(), {
                    "message_id": uuid7(), "role": t["role"], "content": t["content"],
                    "importance": 0.5, "user_id": "a"}) for t in turns]
            began = time.perf_counter()
            apply_events(writer, events)
            times.append(time.perf_counter() - began)
    finally:
        writer.close()
    return np.array(times) * 1000


def figures(times: np.ndarray) -> dict[str, float]:
    return {"p50": float(np.percentile(times, 50)), "p99": float(np.percentile(times, 99)),
            "p99.9": float(np.percentile(times, 99.9)), "slowest": float(times.max()),
            "over": float((times > SLOW_MS).sum())}


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--batches", type=int, default=1500)
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args(argv)
    print(f"{args.batches:,} batches of {IN_FLIGHT} turns per round and way; milliseconds "
          "per batch, applied and committed")
    ratios: dict[str, list[float]] = {"p50": [], "p99": [], "slowest": []}
    with scratch_dir() as workdir:
        for r in range(1, args.rounds + 1):
            got = {way: figures(batch_times(workdir / f"{r}-{n}.db", args.batches, way))
                   for n, way in enumerate(WAYS)}
            for way, f in got.items():
                print(f"round {r}: {way:<9}  p50 {f['p50']:6.1f}  p99 {f['p99']:6.1f}  "
                      f"p99.9 {f['p99.9']:6.1f}  slowest {f['slowest']:6.1f}; "
                      f"{f['over']:.0f} over {SLOW_MS:g} ms")
            for name, kept in ratios.items():
                kept.append(got["thread"][name] / got["in commit"][name])
    print("thread / in commit, median of the rounds: " + ", ".join(
        f"{name} x{statistics.median(kept):.2f}" for name, kept in ratios.items()))


if __name__ == "__main__":
    main()
