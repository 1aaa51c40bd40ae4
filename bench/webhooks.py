"""Webhooks: what a hanging receiver costs the writer's commits, and how soon a healthy one
gets a change, in one run.

    .venv/bin/python bench/webhooks.py [--rate 50] [--seconds 6] [--workers 2]

A private Redis with memq's ACL users, a real ``memq writer``, ``memq webhooks run`` and
``--workers`` ``memq worker webhooks`` (each its own process). A producer appends ``--rate`` turns a
second (a third of them 2-8 KB tool outputs), each followed by its ``flush``: from send to
``flush`` returning is the commit lag. Three phases of ``--seconds`` each:

- ``no webhook`` (the baseline);
- ``a hanging receiver``: a webhook of every change whose receiver never answers (each
  delivery waits out its 10 s timeout);
- ``and a healthy one``: the same, and a second webhook whose receiver answers at once;
  its latency is from a turn's send until the receiver has it.

Goal (issue 31): a hanging receiver does not slow the writer's commits (p99 about x1).
"""

from __future__ import annotations

import argparse
import contextlib
import os
import random
import sys
import threading
import time
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import orjson

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.common import chat_text, percentile, private_redis, scratch_dir
from bench.fairness import tool_output
from bench.serve import MODEL_DIR, process, role_urls
from memq import MemoryClient
from memq.authority import Role
from memq.config import Config, EmbedConfig


class Receivers:
    """Two local receivers: one that hangs, one that notes when each turn arrived."""

    def __init__(self) -> None:
        self.arrived: dict[int, float] = {}
        self.stop = threading.Event()
        self.servers = [self._serve(hang=True), self._serve(hang=False)]

    def url(self, hang: bool) -> str:
        return f"http://127.0.0.1:{self.servers[0 if hang else 1].server_address[1]}/"

    def _serve(self, hang: bool) -> ThreadingHTTPServer:
        receivers = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                body = self.rfile.read(int(self.headers["Content-Length"]))
                if hang:
                    receivers.stop.wait(60)
                    return
                data = orjson.loads(body).get("data") or {}
                text = data.get("content") if isinstance(data, dict) else None
                if isinstance(text, str) and text.endswith("]"):
                    receivers.arrived.setdefault(int(text[-7:-1]), time.monotonic())
                self.send_response(200)
                self.end_headers()

            def log_message(self, *args: object) -> None:
                pass

        server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        server.daemon_threads = True
        threading.Thread(target=server.serve_forever, daemon=True).start()
        return server

    def close(self) -> None:
        self.stop.set()
        for server in self.servers:
            server.shutdown()


def produce(config: Config, rate: float, seconds: float, first: int
            ) -> dict[int, tuple[float, float]]:
    """Turns numbered from ``first``: each one's send and commit (flush returned) times."""
    rng, times = random.Random(first), {}
    with MemoryClient(config=config) as producer:
        begin = time.monotonic()
        for n in range(int(rate * seconds)):
            time.sleep(max(0.0, begin + n / rate - time.monotonic()))
            i = first + n
            text = tool_output(i, rng) if i % 3 == 0 else chat_text(i)
            sent = time.monotonic()
            producer.append(f"s{i % 4}", "user", f"{text} [{i:06d}]")
            producer.flush(30)
            times[i] = (sent, time.monotonic())
    return times


def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n")[0])
    parser.add_argument("--rate", type=float, default=50.0)
    parser.add_argument("--seconds", type=float, default=6.0)
    parser.add_argument("--workers", type=int, default=2, help="memq worker webhooks")
    args = parser.parse_args()
    with private_redis() as url, scratch_dir() as tmp:
        run(url, tmp, args)


@contextlib.contextmanager
def stack(config: Config, tmp: Path, workers: int) -> Iterator[None]:
    env = {**os.environ, "MEMQ_EMBED_MODEL_DIR": str(MODEL_DIR), "MEMQ_CONFIG": ""}
    store = ("--db", config.db_path)
    with contextlib.ExitStack() as processes:
        processes.enter_context(process("writer", *store, env=env, log=tmp / "writer.log"))
        processes.enter_context(process("webhooks", "run", *store, env=env,
                                        log=tmp / "dispatch.log"))
        for n in range(workers):
            processes.enter_context(process("worker", "webhooks", *store, env=env,
                                            log=tmp / f"deliver-{n}.log"))
        yield


def run(url: str, tmp: Path, args: argparse.Namespace) -> None:
    urls = role_urls(url, tmp)
    config = Config(redis_url=urls[Role.ADMIN], db_path=str(tmp / "memq.db"),
                    embed=EmbedConfig(model_dir=str(MODEL_DIR)))
    receivers = Receivers()
    try:
        with stack(config, tmp, args.workers), MemoryClient(config=config) as person:
            person.append("warm-up", "user", "the writer has made its database")
            person.flush(60)
            lags = {"no webhook": produce(config, args.rate, args.seconds, 0)}
            person.add_webhook(receivers.url(hang=True), types=["*"])
            person.flush(60)
            lags["a hanging receiver"] = produce(config, args.rate, args.seconds, 100_000)
            person.add_webhook(receivers.url(hang=False), types=["message.appended"])
            person.flush(60)
            lags["and a healthy one"] = produce(config, args.rate, args.seconds, 200_000)
            time.sleep(2.0)  # the last deliveries arrive
        report(lags, receivers.arrived, args)
    finally:
        receivers.close()


def report(lags: dict[str, dict[int, tuple[float, float]]], arrived: dict[int, float],
           args: argparse.Namespace) -> None:
    print(f"commit lag: {args.rate:g} turns/s for {args.seconds:g} s a phase (a third 2-8 KB "
          "tool outputs), from send until flush returned")
    base = percentile([c - s for s, c in lags["no webhook"].values()], 99)
    for label, times in lags.items():
        values = [c - s for s, c in times.values()]
        p50, p99 = percentile(values, 50), percentile(values, 99)
        print(f"  {label:<20} p50 {p50 * 1000:6.1f} ms  p99 {p99 * 1000:6.1f} ms  "
              f"(p99 x{p99 / base:.2f} of no webhook)")
    healthy = lags["and a healthy one"]
    got = [arrived[i] - healthy[i][0] for i in healthy if i in arrived]
    print(f"healthy receiver beside the hanging one: {len(got)} of {len(healthy)} turns, "
          f"send to arrival p50 {percentile(got, 50) * 1000:.1f} ms, "
          f"p99 {percentile(got, 99) * 1000:.1f} ms")


if __name__ == "__main__":
    main()
