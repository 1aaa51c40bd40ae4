"""What fresh reads cost: get_context with and without the cross-process freshness check.

Every ``get_context`` first asks the database whether the session changed since this
process read it — one primary-key lookup of the session's mark (``store/read/sessions.py``)
— and loads the session again only if it did. Measured in one run, on one database, the
variants interleaved call by call on randomly chosen sessions:

- ``check alone``   ``WorkingMemory.sync`` on a session nobody changed;
- ``get_context``   as shipped (no query: recency and importance, the cheapest call, so
                    the check's share is as large as it gets);
- ``unchecked``     the same call on a second client whose check is switched off (what
                    get_context cost before, when it could be stale);
- ``reload``        get_context right after a turn was committed to that session by
                    someone else (the check finds the change and loads the session again).

The database holds ``--sessions`` agent sessions of ``--turns`` turns each; a third of the
turns are tool outputs of 2-8 KB. It is built through ``Writer.apply_batch`` (validation,
log, projections; Redis is not involved).

    .venv/bin/python bench/freshness.py [--sessions 1000] [--turns 60] [--calls 3000]
"""

from __future__ import annotations

import argparse
import itertools
import random
import statistics
import sys
import time
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.common import chat_text, percentile, private_redis, scratch_dir
from memq import MemoryClient, names
from memq.clock import to_rfc3339, uuid7
from memq.config import Config
from memq.events import Event, EventType, encode
from memq.store.write import batch
from memq.store.write.writer import Writer

BATCH = 1000
START = datetime(2026, 1, 1, tzinfo=UTC)
_stream_ids = itertools.count(1)


def turn(session: str, i: int, rng: random.Random) -> Event:
    """A chat turn, or (one in three) a tool output of 2-8 KB."""
    if i % 3 == 2:
        role, content = "tool", _tool_output(i, rng.randint(2048, 8192))
    else:
        role, content = ("user", "assistant")[i % 2], chat_text(i)
    when = to_rfc3339(START + timedelta(seconds=i))
    return Event(uuid7(), EventType.MESSAGE_APPENDED, session, when, {
        "message_id": uuid7(), "role": role, "content": content,
        "importance": 0.9 if i % 17 == 0 else 0.5})


def _tool_output(i: int, size: int) -> str:
    line = f"{i:06d}  -rw-r--r--  1 agent agent  4096 Jan  1 00:00 src/module_{i % 97}.py\n"
    return (line * (size // len(line) + 1))[:size]


def apply(writer: Writer, events: list[Event]) -> None:
    entries = [batch.Entry(names.ADMIN_INBOX_STREAM, f"{next(_stream_ids)}-0".encode(),
                           {names.EVENT_FIELD: encode(e)}) for e in events]
    decoded = batch.decode_entries(entries, writer.config.limits)
    result = writer.apply_batch(decoded, entries[-1].id.decode())
    assert result.rejected == 0, "bench events were rejected"


def build(writer: Writer, sessions: list[str], turns: int) -> float:
    rng = random.Random(7)
    began = time.perf_counter()
    events = (turn(s, i, rng) for i in range(turns) for s in sessions)
    while chunk := list(itertools.islice(events, BATCH)):
        apply(writer, chunk)
    return time.perf_counter() - began


def timed(call: Callable[[], object]) -> float:
    began = time.perf_counter()
    call()
    return time.perf_counter() - began


def measure(checked: MemoryClient, unchecked: MemoryClient, writer: Writer,
            sessions: list[str], calls: int) -> dict[str, list[float]]:
    rng = random.Random(11)
    samples: dict[str, list[float]] = {
        "check alone": [], "get_context": [], "unchecked": [], "reload": []}
    variants: list[tuple[str, Callable[[str], object]]] = [
        ("check alone", checked.working_memory.sync),
        ("get_context", checked.get_context),
        ("unchecked", unchecked.get_context),
    ]
    for i in range(calls):
        session = rng.choice(sessions)
        rng.shuffle(variants)  # no variant always runs first, on a cold cache line
        for name, call in variants:
            samples[name].append(timed(lambda c=call, s=session: c(s)))  # type: ignore[misc]
        if i % 10 == 0:
            apply(writer, [turn(session, 10_000 + i, rng)])  # another process's turn
            samples["reload"].append(timed(lambda s=session: checked.get_context(s)))  # type: ignore[misc]
    return samples


def report(samples: dict[str, list[float]]) -> None:
    ms = {name: [v * 1000 for v in values] for name, values in samples.items()}
    for name, values in ms.items():
        print(f"{name:<13} p50 {percentile(values, 50):7.3f} ms  p95 "
              f"{percentile(values, 95):7.3f} ms  ({len(values)} calls)")
    checked, unchecked = statistics.median(ms["get_context"]), statistics.median(ms["unchecked"])
    print(f"added by the check at p50: {checked - unchecked:.3f} ms (goal <= 0.2 ms); "
          f"get_context / unchecked p50 ratio {checked / unchecked:.2f}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--sessions", type=int, default=1000)
    parser.add_argument("--turns", type=int, default=60, help="turns per session")
    parser.add_argument("--calls", type=int, default=3000, help="timed rounds")
    args = parser.parse_args()
    sessions = [f"agent-{i}" for i in range(args.sessions)]
    with private_redis() as url, scratch_dir() as tmp:
        config = Config(redis_url=url, db_path=str(Path(tmp) / "memq.db"))
        writer = Writer.open(config, None)  # type: ignore[arg-type]  # Redis is never used
        try:
            build_s = build(writer, sessions, args.turns)
            size_mb = Path(config.db_path).stat().st_size / 1e6
            print(f"database: {args.sessions:,} sessions x {args.turns} turns "
                  f"({args.sessions * args.turns:,} messages, {size_mb:.0f} MB), built in "
                  f"{build_s:.1f} s")
            with MemoryClient(config=config) as checked, MemoryClient(config=config) as unchecked:
                unchecked.sources.sync = lambda session_id: None  # type: ignore[method-assign]
                for session in sessions:  # both hold every session, as a busy agent host would
                    checked.get_context(session)
                    unchecked.get_context(session)
                report(measure(checked, unchecked, writer, sessions, args.calls))
        finally:
            writer.close()


if __name__ == "__main__":
    main()
