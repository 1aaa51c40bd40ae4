"""What the HTTP API costs: ``memq serve`` against the in-process client, in one run.

    .venv/bin/python bench/serve.py [--sessions 200] [--turns 30] [--threads 16]
                                    [--contexts 25] [--appends 150] [--batches 12]

A private Redis with memq's ACL users, a database of ``--sessions`` agent sessions of
``--turns`` turns (a third of them tool outputs of 2-8 KB; every turn has a vector), a
real ``memq writer`` and a real ``memq serve`` (each its own process, as deployed). Then
``--threads`` concurrent callers, first in this process on ``MemoryClient`` (agent
credentials), then over loopback HTTP on ``RemoteMemoryClient`` (agent token), alternately
twice so that drift in the machine's load hits both sides:

- ``get_context``: a random session with a query never asked before (so the query is
  embedded on both sides: the model runs in the caller's process, or in the server's);
  p50 / p95 per call. In process the threads share one client, as the server's requests
  share its one client per role.
- ``append``: each caller appends ``--appends`` turns one call at a time (its own client),
  then flushes; appends/s is turns over the time until every call returned.
- ``append_many``: each caller sends ``--batches`` batches of 100 turns.

Then authorization's cost: the same ``get_context`` calls over HTTP with an API key that
names the sessions' users (``memq keys create --user ...``: each call checks the session's
owner against the grant), against the shared agent token, alternately in the same run:
from ``--threads`` callers at once, half of them keyed, and from one caller making
``--pairs`` pairs of calls, the key's and the token's in turn (what a key costs a call by
itself; under many callers each call's place in the server's queue varies more than that).

Goals (issue 15): remote get_context p95 <= 2x in-process; >= 5,000 appends/s batched
over HTTP. Issue 27: a key's get_context at most 5% slower at p50 than the shared token's.
The embedding model runs on one thread on both sides (``[embed] threads``).
"""

from __future__ import annotations

import argparse
import dataclasses
import functools
import itertools
import os
import random
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

import numpy as np
import redis

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.common import SAMPLE_TEXTS, chat_text, free_port, percentile, private_redis, scratch_dir
from bench.freshness import apply, turn
from memq import MemoryClient, RemoteMemoryClient, acl
from memq.authority import Role
from memq.clock import now_rfc3339, uuid7
from memq.config import DEFAULT_MODEL_NAME, Config, EmbedConfig
from memq.errors import MemqError
from memq.events import Event, EventType
from memq.store.vectors import to_b64
from memq.store.write.writer import Writer

ROOT = Path(__file__).resolve().parent.parent
MODEL_DIR = Path(os.environ.get("MEMQ_EMBED_MODEL_DIR", ROOT / "models" / "all-MiniLM-L6-v2"))
BATCH = 100
USERS = 20
"""The sessions belong to this many users, and the bench's key names them all."""
Client = MemoryClient | RemoteMemoryClient


def build(config: Config, sessions: list[str], turns: int) -> int:
    """The database, through the writer's own batch application (Redis is not involved);
    each turn gets a random unit vector (the search costs what it costs with real ones)."""
    rng = random.Random(7)
    vectors = np.random.default_rng(7)
    writer = Writer.open(config, None)  # type: ignore[arg-type]  # Redis is never used
    try:
        made = (_owned(turn(s, i, rng), s) for i in range(turns) for s in sessions)
        for chunk in _chunks(made, 500):
            apply(writer, chunk)
            apply(writer, [_embedded(e.payload["message_id"], vectors) for e in chunk])
    finally:
        writer.close()
    return len(sessions) * turns


def _owned(event: Event, session: str) -> Event:
    return dataclasses.replace(event, payload={**event.payload, "user_id": user_of(session)})


def user_of(session: str) -> str:
    return f"user-{int(session.rsplit('-', 1)[1]) % USERS}"


def _chunks(events: Iterator[Event], size: int) -> Iterator[list[Event]]:
    while chunk := list(itertools.islice(events, size)):
        yield chunk


def _embedded(message_id: str, vectors: np.random.Generator) -> Event:
    vector = vectors.standard_normal(384).astype(np.float32)
    vector /= np.linalg.norm(vector)
    return Event(uuid7(), EventType.MESSAGE_EMBEDDED, None, now_rfc3339(), {
        "message_id": message_id, "model": DEFAULT_MODEL_NAME, "dim": 384,
        "vector_b64": to_b64(vector)})


@contextmanager
def process(*args: str, env: dict[str, str], log: Path) -> Iterator[subprocess.Popen[bytes]]:
    """``memq ARGS`` as its own process, its log in a file (a pipe nobody reads would fill
    and stop it)."""
    with log.open("wb") as sink:
        proc = subprocess.Popen([sys.executable, "-m", "memq", *args], cwd=ROOT, env=env,
                                stdout=subprocess.DEVNULL, stderr=sink)
        try:
            yield proc
        finally:
            proc.terminate()
            proc.wait(60)


def wait_for_server(url: str, token_file: Path, proc: subprocess.Popen[bytes], log: Path
                    ) -> str:
    """The agent's token, once the server answers with it."""
    for _ in range(1200):
        if proc.poll() is not None:
            raise SystemExit(f"memq serve stopped: {log.read_text()[-2000:]}")
        try:
            token = token_file.read_text().strip()
            with RemoteMemoryClient(url, token=token) as probe:
                probe.tasks()
            return token
        except (OSError, MemqError):
            time.sleep(0.05)
    raise SystemExit("memq serve did not answer")


def in_threads(count: int, work: Callable[[int], list[float]]) -> tuple[float, list[float]]:
    """Run ``work(i)`` in ``count`` threads; wall seconds and every sample they return."""
    results: list[list[float]] = [[] for _ in range(count)]
    start = threading.Barrier(count + 1)

    def run(i: int) -> None:
        start.wait()
        results[i] = work(i)

    threads = [threading.Thread(target=run, args=(i,)) for i in range(count)]
    for t in threads:
        t.start()
    start.wait()
    began = time.perf_counter()
    for t in threads:
        t.join()
    return time.perf_counter() - began, [s for r in results for s in r]


_queries = itertools.count()


def _contexts_of(readers: list[Client], sessions: list[str], calls: int, round_: int,
                 i: int) -> list[float]:
    """Thread ``i``'s context calls in a round: its own reader, its own seed."""
    return contexts(readers[i], sessions, calls, seed=1000 * round_ + i)


def _writes_of(writers: list[Client], work: Callable[[Client, int, str], list[float]],
               count: int, prefix: str, i: int) -> list[float]:
    """Thread ``i``'s writes in a round: its own client, its own sessions."""
    return work(writers[i], count, f"{prefix}-{i}")


def contexts(client: Client, sessions: list[str], calls: int, seed: int) -> list[float]:
    rng = random.Random(seed)
    samples = []
    for _ in range(calls):
        query = f"{rng.choice(SAMPLE_TEXTS)} (question {next(_queries)})"  # never cached
        began = time.perf_counter()
        client.get_context(rng.choice(sessions), query)
        samples.append(time.perf_counter() - began)
    return samples


def appends(client: Client, count: int, prefix: str) -> list[float]:
    for i in range(count):
        client.append(f"{prefix}-{i % 4}", "user", chat_text(i))
    return []


def batches(client: Client, count: int, prefix: str) -> list[float]:
    for b in range(count):
        client.append_many([{"session_id": f"{prefix}-{i % 4}", "role": "user",
                             "content": chat_text(b * BATCH + i)} for i in range(BATCH)])
    return []


class Sides:
    """How each side makes a client for a caller: in process (agent credentials) or remote."""

    def __init__(self, config: Config, agent_url: str, url: str, token: str,
                 key: str) -> None:
        self.config = config.replace(redis_url=agent_url)
        self.url = url
        self.token = token
        self.key = key
        self.shared = MemoryClient(config=self.config)

    def new(self, side: str) -> Client:
        if side == "in-process":
            return MemoryClient(config=self.config)
        return RemoteMemoryClient(self.url, token=self.token)

    def reader(self, side: str) -> Client:
        if side == "in-process":
            return self.shared
        return RemoteMemoryClient(self.url, token=self.key if side == "key" else self.token)


def measure(sides: Sides, args: argparse.Namespace, sessions: list[str]
            ) -> dict[str, dict[str, list[float]]]:
    figures: dict[str, dict[str, list[float]]] = {
        name: {"in-process": [], "remote": []} for name in ("context", "append", "batched")}
    for round_, side in enumerate(["in-process", "remote", "in-process", "remote"]):
        readers = [sides.reader(side) for _ in range(args.threads)]
        _, samples = in_threads(args.threads, functools.partial(
            _contexts_of, readers, sessions, args.contexts, round_))
        figures["context"][side] += samples
        for name, work, per in (("append", appends, args.appends),
                                ("batched", batches, args.batches)):
            writers = [sides.new(side) for _ in range(args.threads)]
            seconds, _ = in_threads(args.threads, functools.partial(
                _writes_of, writers, work, per, f"{name}-{round_}"))
            total = args.threads * per * (BATCH if name == "batched" else 1)
            figures[name][side].append(total / seconds)
            for client in writers:
                client.flush(60)
                client.close()
        for reader in readers:
            if reader is not sides.shared:
                reader.close()
    return figures


def authorization(sides: Sides, args: argparse.Namespace, sessions: list[str]
                  ) -> dict[str, list[float]]:
    """``get_context`` over HTTP with the shared token and with a key at the same moments:
    half the threads each, twice, the halves swapped (so drift in the machine's load and
    in the caches hits both alike)."""
    found: dict[str, list[float]] = {"remote": [], "key": []}
    for round_ in (10, 11):
        kinds = ["remote" if (i + round_) % 2 == 0 else "key" for i in range(args.threads)]
        readers = [sides.reader(kind) for kind in kinds]
        per_thread: list[list[float]] = [[] for _ in kinds]
        in_threads(args.threads, functools.partial(
            _kept, per_thread, functools.partial(
                _contexts_of, readers, sessions, args.contexts, round_)))
        for kind, samples, reader in zip(kinds, per_thread, readers, strict=True):
            found[kind] += samples
            reader.close()
    return found


def paired(sides: Sides, sessions: list[str], pairs: int) -> dict[str, list[float]]:
    """One caller, the key's call and the token's in turn (the first of a pair swapped
    each time), each on a random session with a query never asked before: what the key
    costs a call by itself, with no queue of other callers' calls to stand in."""
    rng = random.Random(99)
    clients = {kind: sides.reader(kind) for kind in ("remote", "key")}
    found: dict[str, list[float]] = {kind: [] for kind in clients}
    try:
        for i in range(pairs):
            session = rng.choice(sessions)
            for kind in ("remote", "key") if i % 2 else ("key", "remote"):
                query = f"{rng.choice(SAMPLE_TEXTS)} (question {next(_queries)})"
                began = time.perf_counter()
                clients[kind].get_context(session, query)
                found[kind].append(time.perf_counter() - began)
    finally:
        for client in clients.values():
            client.close()
    return found


def _kept(into: list[list[float]], work: Callable[[int], list[float]], i: int
          ) -> list[float]:
    """Thread ``i``'s samples, kept apart from the others' (``into[i]``)."""
    into[i] = work(i)
    return []


def report(figures: dict[str, dict[str, list[float]]], threads: int) -> None:
    ms = {side: [v * 1000 for v in values] for side, values in figures["context"].items()}
    p = {side: (percentile(v, 50), percentile(v, 95)) for side, v in ms.items()}
    print(f"get_context with a query, {threads} threads ({len(ms['remote'])} calls a side)")
    for side in ("in-process", "remote"):
        print(f"  {side:<11} p50 {p[side][0]:7.2f} ms  p95 {p[side][1]:7.2f} ms")
    print(f"  remote / in-process: p50 x{p['remote'][0] / p['in-process'][0]:.2f}, "
          f"p95 x{p['remote'][1] / p['in-process'][1]:.2f} (goal p95 <= x2)")
    for name, label in (("append", "append, one turn a call"),
                        ("batched", f"append_many, {BATCH} turns a call")):
        rates = {side: float(np.median(v)) for side, v in figures[name].items()}
        print(f"{label}, {threads} callers: in-process {rates['in-process']:,.0f}/s, "
              f"remote {rates['remote']:,.0f}/s "
              f"(remote / in-process x{rates['remote'] / rates['in-process']:.2f})")
    batched = float(np.median(figures["batched"]["remote"]))
    print(f"appends/s batched over HTTP: {batched:,.0f} (goal >= 5,000)")
    for name, label in (("paired", "one caller, in turn"),
                        ("authorization", f"{threads} callers, side by side")):
        ms = {k: [v * 1000 for v in vs] for k, vs in figures[name].items()}
        token = (percentile(ms["remote"], 50), percentile(ms["remote"], 95))
        keyed = (percentile(ms["key"], 50), percentile(ms["key"], 95))
        print(f"get_context over HTTP, {label}: agent token p50 {token[0]:.2f} ms, p95 "
              f"{token[1]:.2f} ms; a key of {USERS} users p50 {keyed[0]:.2f} ms, p95 "
              f"{keyed[1]:.2f} ms; key / agent token: p50 x{keyed[0] / token[0]:.2f}, "
              f"p95 x{keyed[1] / token[1]:.2f} (goal p50 <= x1.05)")


def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n")[0])
    parser.add_argument("--sessions", type=int, default=200)
    parser.add_argument("--turns", type=int, default=30, help="turns per session")
    parser.add_argument("--threads", type=int, default=16, help="concurrent callers")
    parser.add_argument("--contexts", type=int, default=25, help="get_context calls a caller")
    parser.add_argument("--appends", type=int, default=150, help="appends a caller")
    parser.add_argument("--batches", type=int, default=12, help="batches of 100 a caller")
    parser.add_argument("--pairs", type=int, default=300,
                        help="key and token calls in turn, from one caller")
    args = parser.parse_args()
    sessions = [f"agent-{i}" for i in range(args.sessions)]
    with private_redis() as url, scratch_dir() as tmp:
        run(url, tmp, sessions, args)


def run(url: str, tmp: Path, sessions: list[str], args: argparse.Namespace) -> None:
    urls = role_urls(url, tmp)
    config = Config(redis_url=urls[Role.ADMIN], db_path=str(tmp / "memq.db"),
                    embed=EmbedConfig(model_dir=str(MODEL_DIR)))
    messages = build(config, sessions, args.turns)
    print(f"database: {len(sessions):,} sessions x {args.turns} turns ({messages:,} messages,"
          f" a third tool outputs of 2-8 KB, each with a vector)")
    env = {**os.environ, "MEMQ_EMBED_MODEL_DIR": str(MODEL_DIR), "MEMQ_CONFIG": ""}
    port = free_port()
    serve_log = tmp / "serve.log"
    with process("writer", "--db", config.db_path, env=env, log=tmp / "writer.log"), \
            process("serve", "--db", config.db_path, "--port", str(port), env=env,
                    log=serve_log) as server:
        server_url = f"http://127.0.0.1:{port}"
        token = wait_for_server(server_url, tmp / "agent.token", server, serve_log)
        sides = Sides(config, urls[Role.AGENT], server_url, token, scoped_key(config))
        for side in ("in-process", "remote"):  # load the model and the caches on both sides
            contexts(sides.reader(side), sessions[:4], 3, seed=0)
        figures = measure(sides, args, sessions)
        figures["authorization"] = authorization(sides, args, sessions)
        figures["paired"] = paired(sides, sessions, args.pairs)
        report(figures, args.threads)
        sides.shared.close()


def scoped_key(config: Config) -> str:
    """A key naming every user of the bench's sessions, minted by the person."""
    with MemoryClient(config=config) as person:
        made = person.create_key("bench", users=[f"user-{u}" for u in range(USERS)])
        person.flush(60)
    return made.secret


def role_urls(url: str, directory: Path) -> dict[Role, str]:
    """memq's ACL users in the private Redis, their URL files beside the database."""
    passwords = acl.new_passwords()
    acl.set_users(redis.Redis.from_url(url), passwords)
    urls = {role: acl.role_url(url, role, passwords[role]) for role in Role}
    acl.write_url_files(directory, urls)
    return urls


if __name__ == "__main__":
    main()
