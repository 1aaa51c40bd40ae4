"""The change feed: how soon a follower sees a commit, and how fast it reads a backlog.

    .venv/bin/python bench/changes.py [--rate 50] [--seconds 8] [--backlog 20000]

A private Redis with memq's ACL users, a real ``memq writer`` and ``memq serve`` (each its
own process). A producer appends ``--rate`` turns a second (a third of them tool outputs
of 2-8 KB), each followed by its ``flush``. Two followers run meanwhile: one in process
(``MemoryClient.changes()``), one over HTTP (``GET /v1/changes``, server-sent events).

- **latency**: for each turn, from its send until each follower has it, against the
  baseline of the same turns from send until ``flush`` returned (the writer's commit seen
  by the producer); p50 / p99 and their ratios.
- **throughput**: ``--backlog`` turns committed at once (``append_many``), then a follower
  reads the whole feed from the start: changes a second, in process and over HTTP,
  against the rate the writer committed them.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import random
import re
import sys
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import httpx
import orjson

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.common import chat_text, free_port, percentile, private_redis, scratch_dir
from bench.fairness import tool_output
from bench.serve import MODEL_DIR, process, role_urls, wait_for_server
from memq import MemoryClient
from memq.authority import Role
from memq.config import Config, EmbedConfig

TAG = re.compile(r"\[(\d{6})\]$")
"""The turn's number at the end of each latency turn's text."""


def text(i: int, rng: random.Random) -> str:
    return tool_output(i, rng) if i % 3 == 0 else chat_text(i)


def sse(url: str, token: str, after: int | None = None) -> Iterator[dict[str, object]]:
    """Each change of ``GET /v1/changes``, as it arrives."""
    params = {} if after is None else {"after": after}
    with httpx.stream("GET", f"{url}/v1/changes", params=params, timeout=60,
                      headers={"Authorization": f"Bearer {token}"}) as answer:
        for line in answer.iter_lines():
            if line.startswith("data: "):
                yield orjson.loads(line[6:])


def follow(changes: Iterator[dict[str, object]], seen: dict[int, float],
           stop: threading.Event) -> None:
    for change in changes:
        if stop.is_set():
            return
        data = change.get("data")
        content = data.get("content") if isinstance(data, dict) else None
        tag = TAG.search(content) if isinstance(content, str) else None
        if tag is not None:
            seen.setdefault(int(tag.group(1)), time.monotonic())


def latency(config: Config, url: str, token: str, args: argparse.Namespace
            ) -> dict[str, list[float]]:
    rng, stop = random.Random(7), threading.Event()
    seen: dict[str, dict[int, float]] = {"in process": {}, "over HTTP": {}}
    with MemoryClient(config=config) as reader:
        start = reader.changes_page(limit=1).newest
        local = (dict(c.__dict__) for c in reader.changes(after=start, wait=1.0))
        threads = [threading.Thread(target=follow, args=(feed, seen[name], stop), daemon=True)
                   for name, feed in (("in process", local),
                                      ("over HTTP", sse(url, token, start)))]
        for thread in threads:
            thread.start()
        sent, committed = produce(config, args, rng)
        time.sleep(1.0)  # the last turns reach the followers
        stop.set()
    figures = {"flush (baseline)": [committed[i] - sent[i] for i in committed]}
    for name, times in seen.items():
        figures[name] = [times[i] - sent[i] for i in sent if i in times]
    return figures


def produce(config: Config, args: argparse.Namespace, rng: random.Random
            ) -> tuple[dict[int, float], dict[int, float]]:
    sent: dict[int, float] = {}
    committed: dict[int, float] = {}
    with MemoryClient(config=config) as producer:
        begin = time.monotonic()
        for i in range(int(args.rate * args.seconds)):
            time.sleep(max(0.0, begin + i / args.rate - time.monotonic()))
            sent[i] = time.monotonic()
            producer.append(f"s{i % 4}", "user", f"{text(i, rng)} [{i:06d}]")
            producer.flush(30)
            committed[i] = time.monotonic()
    return sent, committed


def throughput(config: Config, url: str, token: str, backlog: int) -> dict[str, float]:
    rng = random.Random(11)
    with MemoryClient(config=config) as producer:
        start = producer.changes_page(limit=1).newest
        began = time.monotonic()
        for chunk in range(0, backlog, 500):
            producer.append_many([{"session_id": f"b{i % 8}", "role": "user",
                                   "content": text(i, rng)}
                                  for i in range(chunk, min(chunk + 500, backlog))])
        producer.flush(300)
        rates = {"writer commits (baseline)": backlog / (time.monotonic() - began)}
        rates["in process"] = _rate(lambda: sum(
            1 for _ in producer.changes(after=start, follow=False)), backlog)
    rates["over HTTP"] = _rate(lambda: _until(sse(url, token, start), backlog), backlog)
    return rates


def _until(changes: Iterator[dict[str, object]], count: int) -> int:
    return sum(1 for _, _ in zip(range(count), changes, strict=False))


def _rate(read: Callable[[], int], expected: int) -> float:
    began = time.monotonic()
    got = read()
    if got < expected:
        raise SystemExit(f"a follower read {got} changes of {expected}")
    return got / (time.monotonic() - began)


def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n")[0])
    parser.add_argument("--rate", type=float, default=50.0, help="turns a second")
    parser.add_argument("--seconds", type=float, default=8.0)
    parser.add_argument("--backlog", type=int, default=20_000)
    args = parser.parse_args()
    with private_redis() as url, scratch_dir() as tmp:
        run(url, tmp, args)


def run(url: str, tmp: Path, args: argparse.Namespace) -> None:
    urls = role_urls(url, tmp)
    config = Config(redis_url=urls[Role.AGENT], db_path=str(tmp / "memq.db"),
                    embed=EmbedConfig(model_dir=str(MODEL_DIR)))
    env = {**os.environ, "MEMQ_EMBED_MODEL_DIR": str(MODEL_DIR), "MEMQ_CONFIG": ""}
    port = free_port()
    with contextlib.ExitStack() as stack:
        stack.enter_context(process("writer", "--db", config.db_path, env=env,
                                    log=tmp / "writer.log"))
        server = stack.enter_context(process("serve", "--db", config.db_path, "--port",
                                             str(port), env=env, log=tmp / "serve.log"))
        served = f"http://127.0.0.1:{port}"
        token = wait_for_server(served, tmp / "agent.token", server, tmp / "serve.log")
        report(latency(config, served, token, args), throughput(config, served, token,
                                                                args.backlog), args)


def report(latencies: dict[str, list[float]], rates: dict[str, float],
           args: argparse.Namespace) -> None:
    print(f"latency: {args.rate:g} turns/s for {args.seconds:g} s (a third 2-8 KB tool "
          "outputs), from send until seen")
    base = percentile(latencies["flush (baseline)"], 50)
    base99 = percentile(latencies["flush (baseline)"], 99)
    for name, values in latencies.items():
        p50, p99 = percentile(values, 50), percentile(values, 99)
        print(f"  {name:<18} {len(values):5d} turns  p50 {p50 * 1000:7.1f} ms  p99 "
              f"{p99 * 1000:7.1f} ms  (x{p50 / base:.2f} / x{p99 / base99:.2f} of flush)")
    print(f"throughput: a backlog of {args.backlog:,} turns read from the start")
    writer = rates["writer commits (baseline)"]
    for name, rate in rates.items():
        print(f"  {name:<26} {rate:9,.0f} changes/s  (x{rate / writer:.2f} of the writer)")


if __name__ == "__main__":
    main()
