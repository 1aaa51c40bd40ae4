"""The price of durability on appends: ``[redis] fsync`` and ``[client] wait_replicas``.

    .venv/bin/python bench/durability.py [--appends 500] [--batched 20000] [--rounds 4]

After an untimed warm-up, the real client appends the agent mix (conversation turns and
long tool outputs), first one at a time (each append acknowledged before the next: the
latency an agent waits), then ``--batched`` of them in ``client.batched()`` (500 per round
trip).

1. ``[redis] fsync``: an append-only Redis as ``memq up`` runs it, in a directory on this
   disk, with ``appendfsync everysec`` (the default), then ``always`` (every append on disk
   before Redis acknowledges it).
2. ``[client] wait_replicas``: a master and one replica on this host, appends with
   ``wait_replicas = 0`` (the default), then ``1`` (Redis WAIT after each send).

Each round measures a setting and its default seconds apart (which goes first alternates),
in fresh servers; the figure is the median ratio over the rounds (the machine is shared).
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import redis

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.agent_mix import agent_mix
from bench.common import percentile
from memq import MemoryClient
from memq.config import ClientConfig, Config
from memq.testing import RedisServer

WARM_UP = 300
"""Appends sent, untimed, before each measurement."""


@dataclass
class Figures:
    single_per_s: float
    p50_ms: float
    p99_ms: float
    batched_per_s: float

    def line(self, label: str) -> str:
        return (f"  {label:<22} one at a time {self.single_per_s:>8,.0f}/s "
                f"(p50 {self.p50_ms:.2f} ms, p99 {self.p99_ms:.2f} ms), "
                f"batched {self.batched_per_s:>8,.0f}/s")


def appends(config: Config, texts: list[str], batched: int) -> Figures:
    """Appends through the real client; nothing needs the writer to run."""
    latencies = []
    with MemoryClient(config=config) as client:
        # Not timed: the first connection, the role lookup, and a replica link that is
        # slow to answer its first WAITs (tens of ms each, then well under one).
        for i in range(WARM_UP):
            client.append("warm-up", "user", texts[i % len(texts)])
        started = time.perf_counter()
        for i, text in enumerate(texts):
            begun = time.perf_counter()
            client.append(f"bench-{i % 8}", "tool" if "\n" in text else "user", text)
            latencies.append((time.perf_counter() - begun) * 1000)
        single = len(texts) / (time.perf_counter() - started)
        bulk = [texts[i % len(texts)] for i in range(batched)]
        started = time.perf_counter()
        with client.batched():
            for i, text in enumerate(bulk):
                client.append(f"bulk-{i % 8}", "user", text)
        batched_rate = len(bulk) / (time.perf_counter() - started)
    return Figures(single, percentile(latencies, 50), percentile(latencies, 99), batched_rate)


@contextmanager
def servers(base: Path, fsync: str, replica: bool) -> Iterator[str]:
    """An append-only master (and its replica); yields the master's URL."""
    with tempfile.TemporaryDirectory(dir=base) as tmp:
        master = RedisServer(Path(tmp), appendonly=True, options=("--appendfsync", fsync))
        master.start()
        started = [master]
        try:
            if replica:
                (Path(tmp) / "replica").mkdir()
                started.append(RedisServer(Path(tmp) / "replica", replica_of=master.port))
                started[-1].start()
                _wait_for_replica(master)
            yield master.url
        finally:
            for server in started:
                server.kill()


def _wait_for_replica(master: RedisServer) -> None:
    client = redis.Redis(port=master.port)
    for _ in range(1000):
        info = client.info("replication")
        if info.get("slave0", {}).get("state") == "online":
            return
        time.sleep(0.01)
    raise SystemExit("the replica did not sync")


def measure(base: Path, texts: list[str], batched: int, *, fsync: str = "everysec",
            replica: bool = False, wait_replicas: int = 0) -> Figures:
    with servers(base, fsync, replica) as url:
        config = Config(redis_url=url, db_path=str(base / "unused.db"),
                        client=ClientConfig(wait_replicas=wait_replicas))
        return appends(config, texts, batched)


def pair(round_: int, default: Callable[[], Figures],
         chosen: Callable[[], Figures]) -> tuple[Figures, Figures]:
    """Both runs of a round, the default first in odd rounds, last in even ones: whatever
    favours the first (or second) run of a process favours each side as often."""
    if round_ % 2:
        chosen_figures = chosen()
        return default(), chosen_figures
    default_figures = default()
    return default_figures, chosen()


def compare(title: str, runs: list[tuple[Figures, Figures]], labels: tuple[str, str]) -> None:
    print(title)
    for i, (default, chosen) in enumerate(runs, 1):
        print(f" round {i}")
        print(default.line(labels[0]))
        print(chosen.line(labels[1]))
    single = statistics.median(c.single_per_s / d.single_per_s for d, c in runs)
    bulk = statistics.median(c.batched_per_s / d.batched_per_s for d, c in runs)
    print(f" ratio {labels[1]} / {labels[0]}: one at a time {single:.2f}, "
          f"batched {bulk:.2f} (median of {len(runs)})")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--appends", type=int, default=500)
    parser.add_argument("--batched", type=int, default=20_000)
    parser.add_argument("--rounds", type=int, default=4)
    parser.add_argument("--dir", type=Path, default=Path.cwd(),
                        help="where the servers keep their files (a real disk: fsync)")
    args = parser.parse_args()
    texts = agent_mix(args.appends)
    print(f"appends per run: {args.appends:,} one at a time, {args.batched:,} batched "
          f"(agent mix, mean {statistics.mean(map(len, texts)):,.0f} characters)")
    fsync, wait = [], []
    for round_ in range(args.rounds):
        fsync.append(pair(round_, lambda: measure(args.dir, texts, args.batched),
                          lambda: measure(args.dir, texts, args.batched, fsync="always")))
        wait.append(pair(round_, lambda: measure(args.dir, texts, args.batched, replica=True),
                         lambda: measure(args.dir, texts, args.batched, replica=True,
                                         wait_replicas=1)))
    compare("[redis] fsync (append-only Redis, no replica)", fsync,
            ("fsync = everysec", "fsync = always"))
    compare("[client] wait_replicas (master and one replica on this host)", wait,
            ("wait_replicas = 0", "wait_replicas = 1"))


if __name__ == "__main__":
    main()
