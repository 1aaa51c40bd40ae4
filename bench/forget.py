"""What forgetting a user costs, against a plain set-based DELETE of the same rows.

The database holds ``--messages`` messages of the user to forget, spread over
``--sessions`` sessions, and as many of each of ``--others`` other users (who must stay
untouched). Every message is embedded (a 384-dimension vector, as the default model
makes; random here: the bytes cost the same), a third are tool outputs of 2-8 KB, the
user has facts, and the embedding jobs the writer enqueued for every message (text
inside) are still in Redis, as they are when the workers are behind. A marker string sits
in each of the user's messages.

Measured in one run, on copies of the same database:

- ``memq``      ``forget_user`` through a real writer: from sending the event until the
                client's ``flush()`` returns (committed: the user hidden from every read),
                and until ``wait_forgotten`` returns (every message erased in bounded steps
                between the writer's batches, WAL checkpointed and truncated, RQ jobs and
                results deleted, the outcome published): every trace of the user gone. Also
                the CPU time the process spent meanwhile (the writer runs in a thread of
                it). What the steps spare other agents: bench/forget_stall.py.
- ``baseline``  one ``DELETE FROM messages WHERE user_id = ?`` in a transaction on a
                copy, with SQLite's defaults (``secure_delete`` off, no checkpoint): what
                a set-based delete costs (time and CPU time), and how much of the text
                it leaves in the file and the WAL.

Then the marker is counted in the raw bytes of each database and its WAL. Last, one
session (250 messages) of a user who stays is forgotten the same way, against a DELETE of
its messages: what forgetting a conversation costs in a database of 20,000 messages.

With ``--statements N``, the N statements the writer spent most time in while it forgot
the user (SQLite's own timing, through apsw's profile hook; a statement run inside
another, as FTS5 reading the text it unindexes, counts in both).

    .venv/bin/python bench/forget.py [--messages 10000] [--sessions 40] [--others 2]
                                     [--statements 12]
"""

from __future__ import annotations

import argparse
import itertools
import random
import shutil
import sys
import time
from collections.abc import Callable, Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path

import apsw
import numpy as np
import redis

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.common import chat_text, private_redis, scratch_dir
from memq import MemoryClient, names
from memq.clock import to_rfc3339, uuid7
from memq.config import DEFAULT_MODEL_NAME, Config
from memq.events import Event, EventType, encode
from memq.store.vectors import to_b64
from memq.store.write import batch
from memq.store.write.service import open_writer
from memq.store.write.writer import Writer
from memq.testing import WriterThread

BATCH = 1000
DIM = 384
FORGOTTEN = "u-forgotten"
MARKER = "ZQX-MARKER-7d1f"
"""In every message of the forgotten user: counted in the raw bytes afterwards."""
START = datetime(2026, 1, 1, tzinfo=UTC)
_stream_ids = itertools.count(1)


def _tool_output(i: int, size: int) -> str:
    line = f"{i:06d}  -rw-r--r--  1 agent agent  4096 Jan  1 00:00 src/module_{i % 97}.py\n"
    return (line * (size // len(line) + 1))[:size]


def turns(user: str, sessions: int, count: int, rng: random.Random) -> Iterator[Event]:
    """``count`` turns of ``user`` over ``sessions`` sessions; one in three a tool output."""
    for i in range(count):
        session = f"{user}-s{i % sessions}"
        if i % 3 == 2:
            role, content = "tool", _tool_output(i, rng.randint(2048, 8192))
        else:
            role, content = ("user", "assistant")[i % 2], chat_text(i)
        if user == FORGOTTEN:
            content = f"{content} {MARKER}"
        payload = {"message_id": uuid7(), "role": role, "content": content,
                   "importance": 0.5, "user_id": user}
        yield Event(uuid7(), EventType.MESSAGE_APPENDED, session,
                    to_rfc3339(START + timedelta(seconds=i)), payload)


def embedded(message_id: str, rng: np.random.Generator) -> Event:
    vector = rng.standard_normal(DIM).astype(np.float32)
    vector /= np.linalg.norm(vector)
    return Event(uuid7(), EventType.MESSAGE_EMBEDDED, None, to_rfc3339(START), {
        "message_id": message_id, "model": DEFAULT_MODEL_NAME, "dim": DIM,
        "vector_b64": to_b64(vector)})


def facts(user: str) -> list[Event]:
    mark = MARKER if user == FORGOTTEN else "-"
    return [Event(uuid7(), EventType.FACT_SET, None, to_rfc3339(START), {
        "category": "user", "key": f"k{i}", "value": f"{mark} fact {i}", "source": "user",
        "user_id": user}) for i in range(20)]


def apply(writer: Writer, events: list[Event], *, follow_up: bool = False) -> None:
    entries = [batch.Entry(names.ADMIN_INBOX_STREAM, f"{next(_stream_ids)}-0".encode(),
                           {names.EVENT_FIELD: encode(e)}) for e in events]
    decoded = batch.decode_entries(entries, writer.config.limits)
    result = writer.apply_batch(decoded, entries[-1].id.decode())
    assert result.rejected == 0, "bench events were rejected"
    if follow_up:  # what the writer does after a commit: here, enqueue the embedding jobs
        for hook in writer.after_commit:
            hook(result.effects)


def build(writer: Writer, users: list[str], sessions: int, messages: int) -> float:
    rng, vectors = random.Random(7), np.random.default_rng(7)
    began = time.perf_counter()
    for user in users:
        appended = turns(user, sessions, messages, rng)
        while chunk := list(itertools.islice(appended, BATCH)):
            apply(writer, chunk, follow_up=True)
            apply(writer, [embedded(e.payload["message_id"], vectors) for e in chunk])
        apply(writer, facts(user))
    writer.conn.wal_checkpoint(mode=apsw.SQLITE_CHECKPOINT_TRUNCATE)
    return time.perf_counter() - began


def baseline(path: Path, where: str, value: str) -> tuple[float, float]:
    """One set-based DELETE of messages, SQLite's defaults: (seconds, CPU s)."""
    conn = apsw.Connection(str(path))
    try:
        began, cpu = time.perf_counter(), time.process_time()
        conn.execute("BEGIN")
        conn.execute(f"DELETE FROM messages WHERE {where} = ?", (value,))
        conn.execute("COMMIT")
        return time.perf_counter() - began, time.process_time() - cpu
    finally:
        conn.close()


Timing = tuple[float, float, float, dict[str, object]]
"""(committed, done) seconds from sending a forget, the CPU seconds this process (the
writer's thread, mostly) spent until done, and its outcome."""


Profile = dict[str, list[int]]
"""Statement (whitespace folded) -> [nanoseconds, runs]."""


def forget(config: Config, session: str, profile: Profile) -> tuple[Timing, Timing]:
    """Forget the user (its statements' times in ``profile``), then one session of a user
    who stays."""
    def record(statement: str, nanoseconds: int) -> None:
        entry = profile.setdefault(" ".join(statement.split()), [0, 0])
        entry[0] += nanoseconds
        entry[1] += 1

    with WriterThread(config) as thread, MemoryClient(config=config) as client:
        assert thread.writer is not None
        client.history(f"{FORGOTTEN}-s0", limit=1)  # connections open, role known
        _set_profile(thread.writer.conn, record)
        user = _timed(client, lambda: client.forget_user(FORGOTTEN))
        _set_profile(thread.writer.conn, None)
        one = _timed(client, lambda: client.forget_session(session))
    return user, one


def _set_profile(conn: apsw.Connection, hook: Callable[[str, int], None] | None) -> None:
    # The writer's thread owns the connection; between its statements (it mostly waits on
    # Redis) another thread may set the hook, and apsw says when it is in one.
    for _ in range(10_000):
        try:
            conn.set_profile(hook)
            return
        except apsw.ThreadingViolationError:
            time.sleep(0.001)
    raise RuntimeError("the writer's connection stayed busy for 10 s")


def _timed(client: MemoryClient, send: Callable[[], str]) -> Timing:
    began, cpu = time.perf_counter(), time.process_time()
    event_id = send()
    client.flush(60)
    committed = time.perf_counter() - began
    outcome = client.wait_forgotten(event_id, timeout=60)
    done, cpu = time.perf_counter() - began, time.process_time() - cpu
    return committed, done, cpu, outcome


def marker_hits(path: Path) -> int:
    """How often the marker is in the database file and its WAL, byte for byte."""
    needle = MARKER.encode()
    return sum(p.read_bytes().count(needle) for p in (path, Path(f"{path}-wal")) if p.exists())


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--messages", type=int, default=10_000, help="per user")
    parser.add_argument("--sessions", type=int, default=40, help="per user")
    parser.add_argument("--others", type=int, default=2, help="users who stay")
    parser.add_argument("--keep", type=Path, help="copy the forgotten database here")
    parser.add_argument("--statements", type=int, default=0, metavar="N",
                        help="print the N statements the user's forget spent most time in")
    args = parser.parse_args()
    users = [FORGOTTEN, *(f"u-other-{i}" for i in range(args.others))]
    with private_redis() as url, scratch_dir() as tmp:
        config = Config(redis_url=url, db_path=str(tmp / "memq.db"))
        writer = open_writer(config, redis.Redis.from_url(url))
        try:
            build_s = build(writer, users, args.sessions, args.messages)
        finally:
            writer.close()
        path = Path(config.db_path)
        copy = tmp / "baseline.db"
        shutil.copyfile(path, copy)
        jobs = sum(1 for _ in redis.Redis.from_url(url).scan_iter(
            match="rq:job:memq-embed-*", count=1000))
        print(f"database: {len(users)} users x {args.messages:,} messages "
              f"({args.sessions} sessions each; embedded; a third tool outputs of 2-8 KB), "
              f"{path.stat().st_size / 1e6:.0f} MB, {jobs} embedding jobs in Redis; built in "
              f"{build_s:.1f} s")
        print(f"marker before: {marker_hits(path):,} in the database")
        base_s, base_cpu = baseline(copy, "user_id", FORGOTTEN)
        session = "u-other-0-s1"
        one_base_s, one_base_cpu = baseline(copy, "session_id", session)
        profile: Profile = {}
        (committed_s, done_s, cpu_s, outcome), one = forget(config, session, profile)
        print(f"baseline DELETE      {base_s * 1000:8.1f} ms  "
              f"(marker left in file+WAL: {marker_hits(copy):,})")
        print(f"memq committed       {committed_s * 1000:8.1f} ms  "
              f"(ratio {committed_s / base_s:.1f})")
        print(f"memq every trace     {done_s * 1000:8.1f} ms  (ratio {done_s / base_s:.1f}; "
              f"in steps; marker left in file+WAL: {marker_hits(path)})")
        # The machine's load stretches wall times; CPU time shows the work itself.
        print(f"CPU time: baseline {base_cpu * 1000:.0f} ms, memq until every trace "
              f"{cpu_s * 1000:.0f} ms (ratio {cpu_s / max(base_cpu, 1e-6):.1f})")
        if args.keep:
            shutil.copyfile(path, args.keep)
        print(f"erased: {outcome['messages']} messages, {outcome['events']} events, "
              f"{outcome['jobs']} jobs")
        # Then one session of a user who stays: its cost should follow its own size, not
        # the database's.
        print(f"one session ({one[3]['messages']} messages) of a user who stays: baseline "
              f"DELETE {one_base_s * 1000:.1f} ms (CPU {one_base_cpu * 1000:.0f} ms), memq "
              f"committed {one[0] * 1000:.1f} ms, every trace {one[1] * 1000:.1f} ms "
              f"(ratio {one[1] / one_base_s:.1f}), CPU {one[2] * 1000:.0f} ms")
        print_statements(profile, args.statements)


def print_statements(profile: Profile, count: int) -> None:
    if count <= 0:
        return
    print(f"the user's forget, the {count} statements the writer spent most time in:")
    for statement, (nanoseconds, runs) in sorted(profile.items(), key=lambda kv: -kv[1][0])[
            :count]:
        print(f"  {nanoseconds / 1e6:8.1f} ms {runs:6d}x  {statement[:100]}")


if __name__ == "__main__":
    main()
