"""AsyncMemoryClient against MemoryClient: many agents appending and reading at once.

``--agents`` agents each make ``--turns`` turns (a third of them tool outputs of 2-8 KB,
as agent streams carry) against one Redis, one writer and one database, in one run:

- ``async``: one :class:`~memq.AsyncMemoryClient` shared by ``--agents`` coroutines on one
  event loop (what an asyncio agent host does);
- ``threads``: one :class:`~memq.MemoryClient` per agent thread (the sync client is
  thread-safe for reads; "use one per thread to write").

Three phases, each run for both kinds in alternation (``--repeats`` times, best kept):

- ``append``  every agent appends its turns as fast as it can, then one flush: turns/s
              until every append returned, and until the writer committed them all;
- ``read``    every agent calls get_context (no query: recency and importance) and
              history(10) on its session: calls/s and the p50/p95 of one call;
- ``turn``    an agent's loop: append a turn, then get_context: rounds/s.

Ratios are async / threads (above 1: the async client is faster). A last line measures
what a worker-thread hop costs a short read (``history(s, 10)`` inline and through
``asyncio.to_thread``), the price of never blocking the loop on SQLite.

    .venv/bin/python bench/aio.py [--agents 16] [--turns 150] [--repeats 2]
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import random
import statistics
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import redis

from bench.common import chat_text, percentile, private_redis, scratch_dir
from memq import AsyncMemoryClient, MemoryClient
from memq.config import Config

Timings = dict[str, Any]


def content(agent: int, i: int, rng: random.Random) -> tuple[str, str]:
    """A chat turn, or (one in three) a tool output of 2-8 KB."""
    if i % 3 == 2:
        line = f"{i:06d}  -rw-r--r--  1 agent agent  4096 Jan  1 00:00 src/mod_{agent}.py\n"
        size = rng.randint(2048, 8192)
        return "tool", (line * (size // len(line) + 1))[:size]
    return ("user", "assistant")[i % 2], chat_text(i)


def turns_of(agent: int, count: int) -> list[tuple[str, str]]:
    rng = random.Random(agent)
    return [content(agent, i, rng) for i in range(count)]


# -- async: one client, many coroutines ---------------------------------------------------


async def async_append(client: AsyncMemoryClient, session: str, turns: list[tuple[str, str]]
                       ) -> None:
    for role, text in turns:
        await client.append(session, role, text)


async def async_read(client: AsyncMemoryClient, session: str, calls: int) -> list[float]:
    took = []
    for _ in range(calls):
        began = time.perf_counter()
        await client.get_context(session)
        await client.history(session, 10)
        took.append(time.perf_counter() - began)
    return took


async def async_turns(client: AsyncMemoryClient, session: str, turns: list[tuple[str, str]]
                      ) -> None:
    for role, text in turns:
        await client.append(session, role, text)
        await client.get_context(session)


async def run_async(config: Config, tag: str, agents: int, turns: int) -> Timings:
    async with AsyncMemoryClient(config=config) as client:
        sessions = [f"{tag}-{a}" for a in range(agents)]
        work = [turns_of(a, turns) for a in range(agents)]
        began = time.perf_counter()
        await asyncio.gather(*(async_append(client, s, w) for s, w in zip(sessions, work,
                                                                         strict=True)))
        sent = time.perf_counter() - began
        await client.flush(timeout=300)
        committed = time.perf_counter() - began
        began = time.perf_counter()
        took = await asyncio.gather(*(async_read(client, s, turns // 5) for s in sessions))
        read = time.perf_counter() - began
        began = time.perf_counter()
        await asyncio.gather(*(async_turns(client, f"{s}-loop", w[: turns // 5])
                               for s, w in zip(sessions, work, strict=True)))
        looped = time.perf_counter() - began
        await client.flush(timeout=300)
        return _timings(agents, turns, sent, committed, read, [t for ts in took for t in ts],
                        looped)


# -- threads: one sync client per thread ---------------------------------------------------


def in_threads(count: int, target: Callable[[int], Any]) -> tuple[float, list[Any]]:
    """Run ``target(i)`` in ``count`` threads started together; the wall time, results."""
    results: list[Any] = [None] * count
    start = threading.Barrier(count + 1)

    def body(i: int) -> None:
        start.wait()
        results[i] = target(i)

    threads = [threading.Thread(target=body, args=(i,)) for i in range(count)]
    for thread in threads:
        thread.start()
    start.wait()
    began = time.perf_counter()
    for thread in threads:
        thread.join()
    return time.perf_counter() - began, results


def run_threads(config: Config, tag: str, agents: int, turns: int) -> Timings:
    clients = [MemoryClient(config=config) for _ in range(agents)]
    try:
        sessions = [f"{tag}-{a}" for a in range(agents)]
        work = [turns_of(a, turns) for a in range(agents)]

        def append(a: int) -> None:
            for role, text in work[a]:
                clients[a].append(sessions[a], role, text)

        def read(a: int) -> list[float]:
            took = []
            for _ in range(turns // 5):
                began = time.perf_counter()
                clients[a].get_context(sessions[a])
                clients[a].history(sessions[a], 10)
                took.append(time.perf_counter() - began)
            return took

        def loop(a: int) -> None:
            for role, text in work[a][: turns // 5]:
                clients[a].append(f"{sessions[a]}-loop", role, text)
                clients[a].get_context(f"{sessions[a]}-loop")

        sent, _ = in_threads(agents, append)
        began = time.perf_counter()
        for client in clients:
            client.flush(timeout=300)
        committed = sent + time.perf_counter() - began
        read_s, took = in_threads(agents, read)
        looped, _ = in_threads(agents, loop)
        for client in clients:
            client.flush(timeout=300)
        return _timings(agents, turns, sent, committed, read_s, [t for ts in took for t in ts],
                        looped)
    finally:
        for client in clients:
            client.close()


def _timings(agents: int, turns: int, sent: float, committed: float, read: float,
             calls: list[float], looped: float) -> Timings:
    return {"appended/s": agents * turns / sent, "committed/s": agents * turns / committed,
            "reads/s": len(calls) / read, "read p50 ms": percentile(calls, 50) * 1000,
            "read p95 ms": percentile(calls, 95) * 1000,
            "rounds/s": agents * (turns // 5) / looped}


# -- the cost of a thread hop -----------------------------------------------------------------


async def hop_cost(config: Config, session: str, calls: int) -> tuple[float, float]:
    """p50 of history(s, 10) run inline on the loop and through asyncio.to_thread (ms)."""
    async with AsyncMemoryClient(config=config) as client:
        await client.history(session, 10)  # the pool's connection is open
        inline, hopped = [], []
        for _ in range(calls):
            began = time.perf_counter()
            client._read(_history10, (session,))
            inline.append(time.perf_counter() - began)
            began = time.perf_counter()
            await asyncio.to_thread(client._read, _history10, (session,))
            hopped.append(time.perf_counter() - began)
        return statistics.median(inline) * 1000, statistics.median(hopped) * 1000


def _history10(conn: Any, session: str) -> Any:
    from memq.store.read import messages

    return messages.history(conn, session, 10)


@contextlib.contextmanager
def writer_process(config: Config) -> Iterator[None]:
    """``memq writer`` in a process of its own, as in production (not competing with the
    clients for this process's GIL)."""
    proc = subprocess.Popen([sys.executable, "-m", "memq", "writer", "--db", config.db_path,
                             "--redis-url", config.redis_url], stderr=subprocess.DEVNULL)
    try:
        heartbeat = redis.Redis.from_url(config.redis_url)
        deadline = time.monotonic() + 60
        while heartbeat.get("memq:writer:heartbeat") is None:
            if proc.poll() is not None or time.monotonic() > deadline:
                raise SystemExit("the writer did not start")
            time.sleep(0.05)
        yield
    finally:
        proc.terminate()
        proc.wait(30)


# -- the run -----------------------------------------------------------------------------------


FIGURES = ("appended/s", "committed/s", "reads/s", "read p50 ms", "read p95 ms", "rounds/s")
LOWER_IS_BETTER = {"read p50 ms", "read p95 ms"}


def best(runs: list[Timings]) -> Timings:
    pick = {True: min, False: max}
    return {k: pick[k in LOWER_IS_BETTER](r[k] for r in runs) for k in FIGURES}


def report(results: dict[str, list[Timings]]) -> None:
    a, t = best(results["async"]), best(results["threads"])
    print(f"{'':<13}{'async':>11}{'threads':>11}{'async/threads':>15}")
    for name in FIGURES:
        ratio = t[name] / a[name] if name in LOWER_IS_BETTER else a[name] / t[name]
        print(f"{name:<13}{a[name]:>11.1f}{t[name]:>11.1f}{ratio:>14.2f}x")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--agents", type=int, default=16)
    parser.add_argument("--turns", type=int, default=150, help="turns per agent")
    parser.add_argument("--repeats", type=int, default=2)
    args = parser.parse_args()
    with private_redis() as url, scratch_dir() as tmp:
        config = Config(redis_url=url, db_path=str(Path(tmp) / "memq.db"))
        with writer_process(config):
            measure(config, args)


def measure(config: Config, args: argparse.Namespace) -> None:
    print(f"{args.agents} agents x {args.turns} turns (a third 2-8 KB tool outputs), "
          f"best of {args.repeats}; async/threads > 1: async is better")
    results: dict[str, list[Timings]] = {"async": [], "threads": []}
    for r in range(args.repeats):
        results["async"].append(asyncio.run(run_async(config, f"a{r}", args.agents,
                                                      args.turns)))
        results["threads"].append(run_threads(config, f"t{r}", args.agents, args.turns))
    report(results)
    inline, hopped = asyncio.run(hop_cost(config, "a0-0", 200))
    print(f"history(s, 10): inline p50 {inline:.3f} ms, through a worker thread p50 "
          f"{hopped:.3f} ms (+{hopped - inline:.3f} ms per read off the loop)")


if __name__ == "__main__":
    main()
