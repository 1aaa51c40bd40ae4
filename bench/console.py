"""The console's pages on a big database: each page's p50 / p95 against the API read it
is built on, in the same run.

    .venv/bin/python bench/console.py [--turns 100000] [--calls 40]

A database of ``--turns`` turns of a realistic agent stream (conversation turns, one-word
replies, tool outputs of 20-60 lines: ``bench/agent_mix.py``), with a vector each, in
sessions of 500 turns, owned by 20 users in two tenants (each with 40 facts, one of them
changed 60 times), is built through the writer. A
real ``memq serve`` (the app under uvicorn, on a private Redis) then answers each console
page ``--calls`` times over HTTP, signed in as the person; its baseline is the ``/v1``
call that reads the same data for an agent. The goal: every page under 200 ms at p95 on
100,000 turns.
"""

from __future__ import annotations

import os

for _var in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS"):
    os.environ[_var] = "1"  # before numpy and onnxruntime load

import argparse  # noqa: E402 - the thread settings above must come first
import sys  # noqa: E402
import threading  # noqa: E402
import time  # noqa: E402
from collections.abc import Callable, Iterator  # noqa: E402
from contextlib import contextmanager  # noqa: E402
from datetime import UTC, datetime, timedelta  # noqa: E402
from pathlib import Path  # noqa: E402

import httpx  # noqa: E402
import numpy as np  # noqa: E402
import redis  # noqa: E402
import uvicorn  # noqa: E402

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from bench.agent_mix import agent_mix  # noqa: E402
from bench.common import free_port, percentile, private_redis, scratch_dir  # noqa: E402
from memq import MemoryClient, tenants  # noqa: E402
from memq.authority import Role  # noqa: E402
from memq.clock import to_rfc3339, uuid7  # noqa: E402
from memq.config import Config, EmbedConfig  # noqa: E402
from memq.events import Event, EventType  # noqa: E402
from memq.server.app import create_app  # noqa: E402
from memq.store import vectors  # noqa: E402
from memq.store.write.writer import Writer  # noqa: E402
from memq.testing import apply_events  # noqa: E402
from memq.tokens import Tokens  # noqa: E402

MODEL_DIR = Path(os.environ.get("MEMQ_EMBED_MODEL_DIR", ROOT / "models" / "all-MiniLM-L6-v2"))
TURNS_PER_SESSION = 500
USERS = 20
BATCH = 2000
FACTS = 40
FACT_CHANGES = 60
GOAL_MS = 200.0


def session_of(i: int) -> tuple[str, str]:
    """The stored (session, user) of the ``i``-th session: users in two tenants."""
    user = f"user-{i % USERS:02d}"
    tenant = tenants.DEFAULT if i % 2 == 0 else "acme"
    return tenants.inside(tenant, f"s-{i:04d}"), tenants.inside(tenant, user)


def build(config: Config, turns: int) -> float:
    """``turns`` appended and embedded events, through the writer; returns seconds."""
    texts = agent_mix(turns, seed=5)
    rng = np.random.default_rng(5)
    start = datetime(2026, 1, 1, tzinfo=UTC)
    writer = Writer.open(config, redis.Redis())  # applied directly, not read from Redis
    began = time.perf_counter()
    try:
        for lo in range(0, turns, BATCH):
            events: list[Event | bytes] = []
            for i in range(lo, min(turns, lo + BATCH)):
                events += turn_events(config, i, texts[i], start + timedelta(seconds=i), rng)
            result = apply_events(writer, events)
            assert result.rejected == 0, "bench events were rejected"
        assert apply_events(writer, fact_events(turns)).rejected == 0
    finally:
        writer.close()
    return time.perf_counter() - began


def turn_events(config: Config, i: int, text: str, when: datetime,
                rng: np.random.Generator) -> list[Event | bytes]:
    session, user = session_of(i // TURNS_PER_SESSION)
    at, mid = to_rfc3339(when), uuid7()
    role = "tool" if "\n" in text else ("user", "assistant")[i % 2]
    vector = rng.standard_normal(config.embed.dim).astype(np.float32)
    vector /= np.linalg.norm(vector)
    return [
        Event(uuid7(), EventType.MESSAGE_APPENDED, session, at, {
            "message_id": mid, "role": role, "content": text, "user_id": user,
            "importance": 0.9 if i % 50 == 0 else 0.5}),
        Event(uuid7(), EventType.MESSAGE_EMBEDDED, None, at, {
            "message_id": mid, "model": config.embed.model_name, "dim": config.embed.dim,
            "vector_b64": vectors.to_b64(vector)}),
    ]


def fact_events(turns: int) -> list[Event | bytes]:
    """Each user's facts: FACTS of them, the last one changed FACT_CHANGES times."""
    events: list[Event | bytes] = []
    sessions = max(1, turns // TURNS_PER_SESSION)
    for user in {session_of(i)[1] for i in range(min(sessions, USERS))}:
        for n in range(FACTS + FACT_CHANGES):
            events.append(Event(uuid7(), EventType.FACT_SET, None, to_rfc3339(
                datetime(2026, 6, 1, tzinfo=UTC) + timedelta(minutes=n)), {
                "category": "profile", "key": f"k{min(n, FACTS - 1)}",
                "value": f"value {n} of a fact an agent learned", "source": "agent",
                "user_id": user}))
    return events


@contextmanager
def serving(config: Config, directory: Path) -> Iterator[tuple[str, Tokens]]:
    bases = {role: MemoryClient(config=config) for role in (Role.AGENT, Role.ADMIN)}
    tokens = Tokens.in_directory(directory)
    port = free_port()
    server = uvicorn.Server(uvicorn.Config(create_app(bases, tokens), host="127.0.0.1",
                                           port=port, log_level="warning"))
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    while not server.started:
        time.sleep(0.01)
    try:
        yield f"http://127.0.0.1:{port}", tokens
    finally:
        server.should_exit = True
        thread.join()
        for base in bases.values():
            base.close()


def timed(calls: int, call: Callable[[], httpx.Response]) -> list[float]:
    call()  # warm: the first read of a session fills the caches a console shares
    samples = []
    for _ in range(calls):
        began = time.perf_counter()
        answer = call()
        samples.append((time.perf_counter() - began) * 1000)
        assert answer.status_code == 200, (answer.status_code, answer.text[:300])
    return samples


def pairs(person: httpx.Client, agent: httpx.Client, turns: int
          ) -> list[tuple[str, Callable[[], httpx.Response], Callable[[], httpx.Response]]]:
    """(page, the console's call, its API baseline)."""
    last = (turns - 1) // TURNS_PER_SESSION
    session, user = session_of(last)
    query = "why did the tests fail after the refactor?"
    history: dict[str, str | int] = {"session_id": session, "limit": 100}
    return [
        ("memory", lambda: person.get("/ui/memory"),
         lambda: agent.get("/v1/sessions", params={"limit": 100})),
        ("memory of a user", lambda: person.get("/ui/memory", params={"user": user}),
         lambda: agent.get("/v1/sessions", params={"user_id": user, "limit": 100})),
        ("session timeline", lambda: person.get("/ui/session", params={"id": session}),
         lambda: agent.get("/v1/history", params=history)),
        ("why this context", lambda: person.get("/ui/session", params={
            "id": session, "query": query, "scope": "user"}),
         lambda: agent.post("/v1/context", json={"session_id": session, "query": query,
                                                "scope": "user"})),
        ("fact history", lambda: person.get("/ui/fact", params={
            "category": "profile", "key": f"k{FACTS - 1}", "user": user}),
         lambda: agent.get("/v1/facts/history", params={
             "category": "profile", "key": f"k{FACTS - 1}", "user_id": user})),
        ("approvals + check", lambda: person.get("/ui/approvals", params={
            "command": "git status --short"}),
         lambda: agent.post("/v1/commands/check", json={"command": "git status --short"})),
        ("tasks", lambda: person.get("/ui/tasks"), lambda: agent.get("/v1/tasks")),
        ("rejected", lambda: person.get("/ui/rejected"), lambda: agent.get("/v1/tasks")),
        ("keys", lambda: person.get("/ui/keys"), lambda: agent.get("/v1/tasks")),
        ("health", lambda: person.get("/ui/health"), lambda: agent.get("/v1/whoami")),
    ]


def report(name: str, page: list[float], api: list[float]) -> str:
    p50, p95 = percentile(page, 50), percentile(page, 95)
    b50, b95 = percentile(api, 50), percentile(api, 95)
    verdict = "ok" if p95 <= GOAL_MS else f"OVER the {GOAL_MS:g} ms goal"
    return (f"{name:<18}  page p50 {p50:7.1f} ms  p95 {p95:7.1f} ms   api p50 {b50:6.1f} ms "
            f"p95 {b95:6.1f} ms   page/api p50 x{p50 / b50:.1f}  {verdict}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--turns", type=int, default=100_000)
    parser.add_argument("--calls", type=int, default=40)
    args = parser.parse_args()
    with private_redis() as url, scratch_dir() as tmp:
        config = Config(redis_url=url, db_path=str(tmp / "memq.db"),
                        embed=EmbedConfig(model_dir=str(MODEL_DIR)))
        seconds = build(config, args.turns)
        print(f"{args.turns} turns in {args.turns // TURNS_PER_SESSION or 1} sessions of "
              f"{USERS} users in 2 tenants (built in {seconds:.1f} s)")
        with serving(config, tmp) as (base, tokens), \
                httpx.Client(base_url=base, timeout=60) as person, \
                httpx.Client(base_url=base, timeout=60, headers={
                    "Authorization": f"Bearer {tokens.by_role[Role.AGENT]}"}) as agent:
            person.post("/ui/login", data={"token": tokens.by_role[Role.ADMIN]})
            for name, page, api in pairs(person, agent, args.turns):
                print(report(name, timed(args.calls, page), timed(args.calls, api)))


if __name__ == "__main__":
    main()
