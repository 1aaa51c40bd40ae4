"""Cost of facts, macro learning and approvals, each against a baseline from the same run.

Writer side: events per second applied through the writer's own batch code (real SQLite
file, no Redis, batches of 500), for ``fact.set`` and ``macro.observed`` against
``message.appended`` (the baseline every deployment already pays); ``macro.observed`` in
sessions without a user (the tenant's aggregate alone) and in sessions of 10 users (each
call also counted in its user's rows; each session's first event is one turn naming it).
Read side: ``fact_history`` (a scan of the log's fact events) and ``relevant_facts``
(lexical scoring of every fact) against ``list_facts`` over the same table.
Last, relearning the macros from every recorded call (a forget of tool calls, a
``[retention] tool_calls_days`` pass), against applying the same calls.

    PYTHONPATH=. python bench/facts_macros.py [--facts 5000] [--events 10000] [--rounds 3]
"""

from __future__ import annotations

import argparse
import random
import statistics
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from memq.clock import uuid7
from memq.config import Config
from memq.events import Event, EventType, encode
from memq.store import schema
from memq.store.connection import open_connection
from memq.store.projections.macros import relearn
from memq.store.read.fact_search import relevant_facts
from memq.store.read.facts import fact_history, list_facts
from memq.store.write.writer import Writer
from memq.testing import apply_events

BATCH = 500
NOW = "2026-03-01T09:00:00.000000Z"
WORDS = ["editor", "shell", "language", "timezone", "project", "test", "build", "deploy",
         "branch", "review", "python", "neovim", "zsh", "london", "paris", "coffee", "tea",
         "morning", "evening", "docker", "linux"]


def event(etype: str, payload: dict[str, Any], session: str | None = None) -> Event:
    return Event(id=uuid7(), type=etype, session_id=session, created_at=NOW, payload=payload)


def messages(n: int, rng: random.Random) -> list[Event]:
    return [event(EventType.MESSAGE_APPENDED, {
        "message_id": uuid7(), "role": "user", "importance": 0.5,
        "content": " ".join(rng.choices(WORDS, k=12))}, f"s{i % 50}") for i in range(n)]


def fact_sets(n: int, keys: int, rng: random.Random) -> list[Event]:
    chosen = [rng.randrange(keys) for _ in range(n)]
    return [event(EventType.FACT_SET, {
        "category": f"cat{k % 20}", "key": f"key{k}", "source": rng.choice(["agent", "user"]),
        "value": " ".join(rng.choices(WORDS, k=6))}) for k in chosen]


def users_tool_calls(n: int, rng: random.Random) -> list[Event]:
    """:func:`tool_calls` in sessions that each have a user (10 users, 50 sessions)."""
    turns = [event(EventType.MESSAGE_APPENDED, {
        "message_id": uuid7(), "role": "user", "importance": 0.5, "content": "hello",
        "user_id": f"u{i % 10}"}, f"s{i}") for i in range(50)]
    return turns + tool_calls(n - len(turns), rng)


def tool_calls(n: int, rng: random.Random) -> list[Event]:
    tools = [("terminal", lambda: {"command": rng.choice(["git status", "git diff", "ls -la"])}),
             ("read_file", lambda: {"path": f"src/m{rng.randrange(200)}.py"}),
             ("edit_file", lambda: {"path": f"src/m{rng.randrange(200)}.py", "old": "a",
                                    "new": "b"}),
             ("search", lambda: {"query": " ".join(rng.choices(WORDS, k=3))})]
    calls = []
    for i in range(n):
        tool, args = rng.choice(tools)
        calls.append(event(EventType.MACRO_OBSERVED, {"tool": tool, "args": args()},
                           f"s{i % 50}"))
    return calls


def apply_rate(path: Path, events: list[Event]) -> float:
    conn = open_connection(path)
    schema.migrate(conn)
    writer = Writer(Config(db_path=str(path)), conn, None)  # type: ignore[arg-type]
    raws: list[Event | bytes] = [encode(e) for e in events]  # encoded apart: clients do that
    started = time.perf_counter()
    for start in range(0, len(raws), BATCH):
        result = apply_events(writer, raws[start : start + BATCH])
        assert result.rejected == 0
    elapsed = time.perf_counter() - started
    conn.close()
    return len(events) / elapsed


def interleaved_ms(actions: dict[str, Callable[[], object]], repeat: int = 15) -> dict[str, float]:
    times: dict[str, list[float]] = {name: [] for name in actions}
    for _ in range(repeat):
        for name, action in actions.items():
            started = time.perf_counter()
            action()
            times[name].append((time.perf_counter() - started) * 1000)
    return {name: statistics.median(values) for name, values in times.items()}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--facts", type=int, default=5000, help="distinct fact keys")
    parser.add_argument("--events", type=int, default=10000, help="events per writer run")
    parser.add_argument("--rounds", type=int, default=3, help="interleaved writer rounds")
    args = parser.parse_args()
    rng = random.Random(8)
    workloads = {
        "message.appended (baseline)": messages(args.events, rng),
        "fact.set": fact_sets(args.events, args.facts, rng),
        "macro.observed": tool_calls(args.events, rng),
        "macro.observed, users' sessions": users_tool_calls(args.events, rng),
    }
    with tempfile.TemporaryDirectory(prefix="memq-bench-") as tmp:
        base = Path(tmp)
        # Rounds interleave the types and each keeps its best rate, so a burst of load
        # from another process on a shared machine does not land on one type only.
        rates = dict.fromkeys(workloads, 0.0)
        for round_ in range(args.rounds):
            for n, (name, events) in enumerate(workloads.items()):
                path = base / f"r{round_}-{n}.db"
                rates[name] = max(rates[name], apply_rate(path, events))
        baseline = rates["message.appended (baseline)"]
        print(f"writer, {args.events} events per type, batches of {BATCH}, "
              f"best of {args.rounds} interleaved rounds:")
        for name, rate in rates.items():
            print(f"  {name:<32} {rate:>9,.0f} events/s   x{rate / baseline:.2f} of baseline")
        facts_db = base / "r0-1.db"
        reader = open_connection(facts_db, readonly=True)
        reads = {
            "list_facts (baseline)": lambda: list_facts(reader),
            "fact_history(one key)": lambda: fact_history(reader, "cat7", "key7"),
            "relevant_facts(query, 5)": lambda: relevant_facts(reader, "which editor?", 5),
        }
        times = interleaved_ms(reads)
        keys = len(list_facts(reader))
        print(f"reads, {keys} facts from {args.events} fact.set events (median of 15, "
              "interleaved):")
        for name, ms in times.items():
            print(f"  {name:<30} {ms:>8.2f} ms   x{ms / times['list_facts (baseline)']:.2f}")
        reader.close()
        for n, name in ((2, "macro.observed"), (3, "macro.observed, users' sessions")):
            relearned = relearn_s(base / f"r{args.rounds - 1}-{n}.db")
            per_call = relearned / args.events * 1e6
            applied = 1e6 / rates[name]
            print(f"relearning the macros from {args.events} recorded calls ({name}; what "
                  "a forget of tool calls or a tool_calls_days pass does, in the writer's "
                  f"transaction): {relearned:.2f} s, {per_call:.0f} µs a call, "
                  f"x{per_call / applied:.2f} of applying them")


def relearn_s(path: Path) -> float:
    """Seconds to learn the macros again from every call in the log (rolled back)."""
    conn = open_connection(path)
    cur = conn.cursor()
    cur.execute("BEGIN IMMEDIATE")
    started = time.perf_counter()
    relearn(cur)
    elapsed = time.perf_counter() - started
    cur.execute("ROLLBACK")
    conn.close()
    return elapsed

if __name__ == "__main__":
    main()
