"""Fairness between keys: one key flooding appends, another's commit lag, in one run.

    .venv/bin/python bench/fairness.py [--seconds 6] [--rate 50] [--flooders 4]

A private Redis with memq's ACL users, a real ``memq writer`` and ``memq serve`` (each its
own process). Key B (user ``b``) appends ``--rate`` turns a second over HTTP, each followed
by its ``flush``: the time from sending the turn until the writer has committed it is B's
commit lag. It is measured in each of these phases, ``--seconds`` each:

- ``alone``: nobody else writes;
- ``A refused at the door``: key A floods the same way with a budget of one event a
  second, so every call is refused (429): what the flood's requests alone cost B on this
  machine, the floor under the next line;
- ``A under its budget``: key A (user ``a``) floods at the same time from ``--flooders``
  processes, each sending batches of 100 turns (tool outputs of 2-8 KB, a third of them) as
  fast as the server lets it: its budget is ``[limits] key_units_per_s`` (500 events a
  second), so past it A gets 429 and retries;
- ``A paced at its budget``: the same processes send A's budget evenly instead, each a
  call every ``--flooders`` x ``--batch`` / budget seconds: what B's turns would cost if A
  spread its calls itself; the rest is the size of A's calls;
- ``A without a budget``: the same flood from a key whose budget is unbounded, what memq
  did before keys had budgets: A's backlog then outgrows the window of waiting items the
  keys' queue is relayed in turn from (store/write/relay.py), and B waits behind it.

First, what the keys' path lets one key commit alone, ``--bulk`` turns in calls of 100, and
then the same beside another key appending one turn at a time (a light key, moved first).

Goal (issue 27): B's p99 with A flooding under its budget at most 2x its p99 alone.
"""

from __future__ import annotations

import argparse
import contextlib
import itertools
import multiprocessing
import os
import random
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.common import chat_text, free_port, percentile, private_redis, scratch_dir
from bench.serve import MODEL_DIR, process, role_urls, wait_for_server
from memq import MemoryClient, RemoteMemoryClient
from memq.authority import Role
from memq.cli.common import integer_in, number_in
from memq.config import Config, EmbedConfig
from memq.errors import FlushTimeout, RateLimited

BATCH = 100
LIGHT_RATE = 200
UNBOUNDED = 10**9


def tool_output(i: int, rng: random.Random) -> str:
    line = f"{i:06d}  -rw-r--r--  1 agent agent  4096 Jan  1 00:00 src/module_{i % 97}.py\n"
    size = rng.randint(2048, 8192)
    return (line * (size // len(line) + 1))[:size]


def a_turns(session: str, numbers: range, rng: random.Random) -> list[dict[str, str]]:
    """Key A's turns: every third a tool output of 2-8 KB, the others chat."""
    return [{"session_id": session, "role": "tool" if j % 3 == 2 else "user",
             "content": tool_output(j, rng) if j % 3 == 2 else chat_text(j)}
            for j in numbers]


def steady(url: str, token: str, rate: float, seconds: float, label: str,
           flush_s: float) -> list[float]:
    """B's appends at ``rate`` a second; each one's seconds from send to committed."""
    lags = []
    with RemoteMemoryClient(url, token=token) as client:
        start = time.monotonic()
        for i in range(int(rate * seconds)):
            time.sleep(max(0.0, start + i / rate - time.monotonic()))
            sent = time.monotonic()
            client.append(f"b-{label}", "user", chat_text(i))
            try:
                client.flush(flush_s)
            except FlushTimeout:  # B's turns stuck behind A's backlog: that is the figure
                lags.append(time.monotonic() - sent)
                break
            lags.append(time.monotonic() - sent)
    return lags


def flood(url: str, token: str, stop: Any, seed: int, sent: Any, batch: int,
          ready: Any, every: float | None = None) -> None:
    """Batches of 100 turns as fast as the server takes them (or one call ``every``
    seconds, from a random moment), until ``stop`` is set; the turns accepted are added to
    ``sent``, and ``ready`` counts the processes whose first call was answered. Run in
    processes of their own: in B's process, their threads would hold the interpreter while
    B's client waits, and B's lag would measure that instead of the service."""
    rng = random.Random(seed)
    # Made once: the flood is the requests, not this process making their text (on two
    # cores that would take the service's CPU, and B's lag would measure the machine).
    turns = a_turns(f"a-{seed}", range(batch), rng)
    answered = False
    slot = time.monotonic() + rng.random() * (every or 0.0)
    with RemoteMemoryClient(url, token=token) as client:
        while not stop.is_set():
            if every is not None:
                stop.wait(max(0.0, slot - time.monotonic()))
                slot += every
            try:
                client.append_many(turns)
                with sent.get_lock():
                    sent.value += batch
            except RateLimited:
                if every is None:
                    stop.wait(0.05)  # a flooder does not honour Retry-After
            if not answered:
                answered = True
                with ready.get_lock():
                    ready.value += 1


def measure(urls: tuple[str, str], b_token: str, flooder: str | None,
            args: argparse.Namespace, label: str, every: float | None = None
            ) -> tuple[list[float], float]:
    """B on the second server, A on the first (the same server when only one runs); A's
    processes each send a call ``every`` seconds, or as fast as they can (None). Returns
    B's lags and the turns A got accepted a second while B ran: B's phase lasts longer than
    ``--seconds`` when B's turns take longer than its interval (each waits to commit)."""
    spawn = multiprocessing.get_context("spawn")
    stop, sent, ready = spawn.Event(), spawn.Value("q", 0), spawn.Value("i", 0)
    floods = [spawn.Process(target=flood, args=(urls[0], flooder, stop, k, sent, args.batch,
                                                ready, every))
              for k in range(args.flooders)] if flooder else []
    for process_ in floods:
        process_.start()
    try:
        # B starts once the flood has: a process starting up (its imports, a second of CPU
        # each) is not the flood, and on two cores B's lag would measure it.
        deadline = time.monotonic() + 60
        while ready.value < len(floods) and time.monotonic() < deadline:
            time.sleep(0.05)
        with sent.get_lock():
            sent.value = 0
        # On stderr as it happens (the table comes at the end): when to attach a profiler
        # to the server for this phase alone.
        print(f"phase {label!r}: B starts, for {args.seconds:g} s", file=sys.stderr,
              flush=True)
        began = time.monotonic()
        lags = steady(urls[1], b_token, args.rate, args.seconds, label, args.flush_timeout)
        rate = sent.value / (time.monotonic() - began)
    finally:
        stop.set()
        for process_ in floods:
            process_.join(60)
    return lags, rate


def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n")[0])
    parser.add_argument("--seconds", type=number_in("duration", 0.1, 3600), default=6.0)
    parser.add_argument("--rate", type=number_in("rate", 0.1, 10_000), default=50.0,
                        help="B's appends a second")
    parser.add_argument("--flooders", type=integer_in("count of processes", 1, 64), default=4,
                        help="A's processes")
    parser.add_argument("--batch", type=integer_in("batch size", 1, 1000), default=BATCH,
                        help="turns in each of A's calls")
    parser.add_argument("--budget", type=integer_in("budget", 1, 10**9), default=None,
                        help="A's units a second (default: [limits] key_units_per_s)")
    parser.add_argument("--flush-timeout", type=number_in("timeout", 0.1, 3600), default=30.0,
                        help="seconds one of B's turns may wait before B gives up a phase")
    parser.add_argument("--bulk", type=integer_in("count of turns", 0, 10**7), default=5000,
                        help="turns one key sends in bulk, first, for its throughput "
                             "(0: no bulk phase)")
    parser.add_argument("--servers", type=int, choices=(1, 2), default=1,
                        help="2: B calls a memq serve process of its own")
    args = parser.parse_args()
    with private_redis() as url, scratch_dir() as tmp:
        run(url, tmp, args)


def run(url: str, tmp: Path, args: argparse.Namespace) -> None:
    urls = role_urls(url, tmp)
    config = Config(redis_url=urls[Role.ADMIN], db_path=str(tmp / "memq.db"),
                    embed=EmbedConfig(model_dir=str(MODEL_DIR)))
    env = {**os.environ, "MEMQ_EMBED_MODEL_DIR": str(MODEL_DIR), "MEMQ_CONFIG": ""}
    ports = [free_port() for _ in range(args.servers)]
    with contextlib.ExitStack() as stack:
        stack.enter_context(process("writer", "--db", config.db_path, env=env,
                                    log=tmp / "writer.log"))
        for port in ports:
            log = tmp / f"serve-{port}.log"
            server = stack.enter_context(process("serve", "--db", config.db_path, "--port",
                                                 str(port), env=env, log=log))
            wait_for_server(f"http://127.0.0.1:{port}", tmp / "agent.token", server, log)
        served = (f"http://127.0.0.1:{ports[0]}", f"http://127.0.0.1:{ports[-1]}")
        with MemoryClient(config=config) as person:
            keys = {name: person.create_key(name, users=[user], units_per_s=units).secret
                    for name, user, units in (("b", "b", None), ("a", "a", args.budget),
                                              ("a-refused", "a", 1),
                                              ("a-unbounded", "a", UNBOUNDED))}
            person.flush(60)
        # First: the unbounded flood below leaves a backlog the writer takes minutes to drain.
        bulk = beside = 0.0
        if args.bulk:
            bulk = in_bulk(served[0], keys["a-unbounded"], args.bulk)
            with appending(served[1], keys["b"], LIGHT_RATE):
                beside = in_bulk(served[0], keys["a-unbounded"], args.bulk)
        budget = args.budget or config.limits.key_units_per_s
        paced = args.flooders * args.batch / budget
        results = {label: measure(served, keys["b"], flooder, args, label, every)
                   for label, flooder, every in (
                       ("alone", None, None),
                       ("A refused at the door", keys["a-refused"], None),
                       ("A under its budget", keys["a"], None),
                       ("A paced at its budget", keys["a"], paced),
                       ("A without a budget", keys["a-unbounded"], None))}
    report(results, args)
    if args.bulk:
        print(f"one key alone in bulk ({args.bulk:,} turns in calls of {BATCH}, a third tool "
              f"outputs): {bulk:,.0f} turns/s committed; beside a key appending one turn "
              f"at a time, up to {LIGHT_RATE} a second: {beside:,.0f}")


@contextlib.contextmanager
def appending(url: str, token: str, rate: int) -> Iterator[None]:
    """Another key's turns, one call each, up to ``rate`` a second, while the block runs:
    a light key beside the bulk one (store/write/relay.py moves it first)."""
    stop = threading.Event()

    def turns() -> None:
        with RemoteMemoryClient(url, token=token) as client:
            for i in itertools.count():
                if stop.wait(1 / rate):
                    return
                client.append("beside", "user", chat_text(i))

    thread = threading.Thread(target=turns)
    thread.start()
    try:
        yield
    finally:
        stop.set()
        thread.join()


def in_bulk(url: str, token: str, count: int) -> float:
    """Turns a second one key gets committed, sending ``count`` in calls of 100 and
    waiting for the last: what the keys' path costs a bulk writer. A call refused while
    the key's queue is full (``server/budgets.py``) sent nothing: it is sent again."""
    rng = random.Random(7)
    calls = [a_turns("bulk", range(start, min(start + BATCH, count)), rng)
             for start in range(0, count, BATCH)]
    with RemoteMemoryClient(url, token=token) as client:
        client.append_many(calls[0][:1])  # the session's owner, before the clock starts
        client.flush(60)
        started = time.monotonic()
        for turns in calls:
            while True:
                try:
                    client.append_many(turns)
                    break
                except RateLimited:  # its queue is full: the writer is behind
                    time.sleep(0.05)
        client.flush(300)
        return count / (time.monotonic() - started)


def report(results: dict[str, tuple[list[float], float]], args: argparse.Namespace) -> None:
    print(f"key B: {args.rate:g} appends/s for {args.seconds:g} s, each until committed; "
          f"key A: {args.flooders} processes of {args.batch}-turn batches; "
          + ("one memq serve" if args.servers == 1 else "B and A on servers of their own"))
    alone = percentile(results["alone"][0], 99) * 1000
    for label, (lags, flooded) in results.items():
        p50, p99 = percentile(lags, 50) * 1000, percentile(lags, 99) * 1000
        gave_up = len(lags) < int(args.rate * args.seconds)
        print(f"  {label:<21} B p50 {p50:7.1f} ms  p99 {p99:7.1f} ms  (x{p99 / alone:.2f}); "
              f"A sent {flooded:,.0f} turns/s"
              + (f"; B gave up after {len(lags)} turns, one not committed in "
                 f"{args.flush_timeout:g} s"
                 if gave_up else ""))
    bounded = percentile(results["A under its budget"][0], 99) * 1000
    refused = percentile(results["A refused at the door"][0], 99) * 1000
    paced = percentile(results["A paced at its budget"][0], 99) * 1000
    print(f"B's p99 with A flooding under its budget / alone: x{bounded / alone:.2f} "
          f"(goal <= x2); with A refused at the door: x{refused / alone:.2f}; with A "
          f"sending its budget evenly: x{paced / alone:.2f}")


if __name__ == "__main__":
    main()
