"""What a big forget costs everyone else: another agent's commit lag while a user of many
turns is forgotten, against its lag before, in one run.

    .venv/bin/python bench/forget_stall.py [--messages 10000] [--rate 50] [--seconds 4]

A private Redis with memq's users, a real ``memq writer`` process, and the database of
bench/forget.py: the user to forget has ``--messages`` turns over 40 sessions (embedded, a
third of them tool outputs of 2-8 KB, a marker in each), another user as many. Another
agent appends ``--rate`` turns a second, each followed by ``flush``: its lag is the time
from sending a turn until the writer has committed it. Measured for ``--seconds`` before
the forget, then from sending ``forget_user`` until ``wait_forgotten`` returns (every
trace gone: the database, its WAL, the jobs in Redis); then the marker is counted in the
database file, its WAL and every Redis value.

Goal (issue 28): the other agent's p99 during the forget at most 100 ms and at most 5x
its p99 before; every trace gone within 10 s.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import sys
import threading
import time
from pathlib import Path
from typing import Any

import redis

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.common import chat_text, percentile, private_redis, scratch_dir
from bench.forget import FORGOTTEN, MARKER, build, marker_hits
from bench.serve import process, role_urls
from memq import MemoryClient
from memq.authority import Role
from memq.config import Config
from memq.store.write.service import open_writer


def steady(client: MemoryClient, rate: float, until: threading.Event | float) -> list[float]:
    """Turns at ``rate`` a second, each until committed, for that many seconds or until the
    event is set; each one's seconds from send to committed."""
    lags: list[float] = []
    start = time.monotonic()
    for i in range(10**9):
        if until.is_set() if isinstance(until, threading.Event) else (
                time.monotonic() - start >= until):
            return lags
        time.sleep(max(0.0, start + i / rate - time.monotonic()))
        sent = time.monotonic()
        client.append("bystander", "user", chat_text(i), user_id="u-bystander")
        client.flush(60)
        lags.append(time.monotonic() - sent)
    return lags


def forget_in_background(config: Config, done: threading.Event, timings: dict[str, Any]
                         ) -> threading.Thread:
    def run() -> None:
        try:
            with MemoryClient(config=config) as person:
                began = time.monotonic()
                event_id = person.forget_user(FORGOTTEN)
                person.flush(120)
                timings["committed"] = time.monotonic() - began
                timings["outcome"] = person.wait_forgotten(event_id, timeout=120)
                timings["every trace"] = time.monotonic() - began
        finally:
            done.set()

    thread = threading.Thread(target=run, name="forget")
    thread.start()
    return thread


def redis_hits(url: str) -> int:
    """Redis keys whose value holds the marker (strings, hashes, lists, streams)."""
    connection = redis.Redis.from_url(url)
    needle, found = MARKER.encode(), 0
    for key in connection.scan_iter(count=1000):
        dumped = connection.dump(key) or b""
        found += needle in dumped
    return found


def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n")[0])
    parser.add_argument("--messages", type=int, default=10_000, help="of the forgotten user")
    parser.add_argument("--rate", type=float, default=50.0, help="the other agent's turns/s")
    parser.add_argument("--seconds", type=float, default=4.0, help="measured before")
    args = parser.parse_args()
    if args.messages < 1 or args.rate <= 0 or args.seconds <= 0:
        parser.error("--messages, --rate and --seconds must be positive")
    with private_redis() as url, scratch_dir() as tmp:
        urls = role_urls(url, tmp)
        config = Config(redis_url=urls[Role.ADMIN], db_path=str(tmp / "memq.db"))
        writer = open_writer(config, redis.Redis.from_url(config.redis_url))
        try:
            build_s = build(writer, [FORGOTTEN, "u-other-0"], 40, args.messages)
        finally:
            writer.close()
        print(f"database: 2 users x {args.messages:,} turns (40 sessions each; embedded; a "
              f"third tool outputs of 2-8 KB), "
              f"{Path(config.db_path).stat().st_size / 1e6:.0f} MB, built in {build_s:.1f} s")
        env = {**os.environ, "MEMQ_CONFIG": ""}
        with contextlib.ExitStack() as stack:
            stack.enter_context(process("writer", "--db", config.db_path, env=env,
                                        log=tmp / "writer.log"))
            agent = stack.enter_context(MemoryClient(config=config.replace(
                redis_url=urls[Role.AGENT])))
            steady(agent, args.rate, 1.0)  # the writer up, connections open
            before = steady(agent, args.rate, args.seconds)
            done, timings = threading.Event(), dict[str, Any]()
            thread = forget_in_background(config, done, timings)
            during = steady(agent, args.rate, done)
            thread.join()
        report(args, before, during, timings, Path(config.db_path), url)


def report(args: argparse.Namespace, before: list[float], during: list[float],
           timings: dict[str, Any], path: Path, url: str) -> None:
    if "every trace" not in timings:
        raise SystemExit("the forget did not finish (see the writer's log)")
    p99_before, p99_during = percentile(before, 99) * 1000, percentile(during, 99) * 1000
    print(f"the other agent, {args.rate:g} turns/s, each until committed:")
    print(f"  before the forget   p50 {percentile(before, 50) * 1000:7.1f} ms  "
          f"p99 {p99_before:7.1f} ms  max {max(before) * 1000:7.1f} ms  ({len(before)} turns)")
    print(f"  during the forget   p50 {percentile(during, 50) * 1000:7.1f} ms  "
          f"p99 {p99_during:7.1f} ms  max {max(during) * 1000:7.1f} ms  ({len(during)} turns)")
    outcome = timings["outcome"]
    print(f"forget_user: committed (the user hidden) after {timings['committed'] * 1000:.0f} "
          f"ms; every trace gone after {timings['every trace']:.2f} s ({outcome['messages']:,} "
          f"messages, {outcome['events']:,} events, {outcome['jobs']} jobs)")
    print(f"marker left: {marker_hits(path)} in the database and its WAL, "
          f"{redis_hits(url)} Redis keys")
    print(f"p99 during / before: x{p99_during / p99_before:.2f} (goal <= x5, and p99 <= 100 ms:"
          f" {p99_during:.0f} ms); every trace gone in {timings['every trace']:.1f} s "
          f"(goal <= 10 s)")


if __name__ == "__main__":
    main()
