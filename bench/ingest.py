"""Ingest throughput and commit lag, end to end, against raw apsw in the same run.

    .venv/bin/python bench/ingest.py [--messages 50000] [--rounds 3] [--rate 1000] [--seconds 10]
                                     [--role admin|agent]

1. End to end: a backlog of N messages is sent by the real client into a private Redis
   while no writer runs; then the real writer (in this process, one thread) drains it.
   Figure: messages committed per second (client -> Redis -> writer -> SQLite).
2. Baseline: the same event and message rows inserted with apsw into a fresh database with
   the same schema and connection policy, message content indexed for lexical search as
   the writer does, in batches of 1,000 (the practical limit).
Steps 1 and 2 alternate for ``--rounds`` rounds, each in fresh files, and each round's ratio
compares two runs seconds apart: on a shared machine, the median ratio is the figure.

3. Commit lag at a steady offered load: the client appends one message at a time at
   ``--rate`` per second while the writer runs; a watcher polls the commit position every
   millisecond. Figure: p50/p99 of append -> committed.

``--role agent`` runs the client with an agent's credentials (memq's ACL users are made in
the private Redis): its sends go through the agent's queue and the writer's relay
(store/write/relay.py) rather than straight into a stream, as the admin's do. Step 1 then
also runs as admin in the same round, and ``agent / admin`` is the relay's cost.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import threading
import time
from pathlib import Path

import orjson
import redis

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.common import chat_text, percentile, private_redis, scratch_dir
from memq import MemoryClient, acl
from memq.authority import STREAM_OF_ROLE, Role
from memq.clock import now_rfc3339, uuid7
from memq.config import Config
from memq.inbox import stream_position
from memq.producers.outbox import commit_key
from memq.store import lexical, schema
from memq.store.connection import open_connection
from memq.store.write.service import open_writer


def end_to_end(config: Config, count: int, writer_url: str | None = None) -> float:
    with MemoryClient(config=config) as client:
        with client.batched():
            for i in range(count):
                client.append(f"session-{i % 50}", "user", chat_text(i))
        writer = open_writer(config, redis.Redis.from_url(writer_url or config.redis_url))
        stop = threading.Event()
        thread = threading.Thread(target=writer.run, args=(stop,))
        started = time.perf_counter()
        thread.start()
        client.flush(timeout=600)
        elapsed = time.perf_counter() - started
        stop.set()
        thread.join()
        writer.close()
    return count / elapsed


def raw_apsw(path: Path, count: int, batch: int = 1000) -> float:
    conn = open_connection(path)
    schema.migrate(conn)
    rows = [_rows(i) for i in range(count)]
    started = time.perf_counter()
    for start in range(0, count, batch):
        chunk = rows[start:start + batch]
        conn.execute("BEGIN IMMEDIATE")
        conn.executemany(
            "INSERT INTO events (event_id, type, version, session_id, created_at, recorded_at,"
            " payload) VALUES (?, 'message.appended', 1, ?, ?, ?, ?)",
            [r[0] for r in chunk],
        )
        conn.executemany(
            "INSERT INTO messages (id, session_id, role, content, created_at, importance, seq)"
            " VALUES (?, ?, 'user', ?, ?, 0.5, ?)",
            [r[1] for r in chunk],
        )
        # The writer indexes message content in the same transaction: so does the baseline.
        lexical.index(conn.cursor(), [(r[1][4], r[1][1], r[1][2], None, None) for r in chunk])
        conn.execute("COMMIT")
    elapsed = time.perf_counter() - started
    conn.close()
    return count / elapsed


_EventRow = tuple[str, str, str, str, str]
"""(event_id, session_id, created_at, recorded_at, payload)."""
_MessageRow = tuple[str, str, str, str, int]
"""(id, session_id, content, created_at, seq)."""


def _rows(i: int) -> tuple[_EventRow, _MessageRow]:
    message_id, session, now, text = uuid7(), f"session-{i % 50}", now_rfc3339(), chat_text(i)
    payload = orjson.dumps(
        {"message_id": message_id, "role": "user", "content": text, "importance": 0.5}
    ).decode()
    return (uuid7(), session, now, now, payload), (message_id, session, text, now, i + 1)


def commit_lag(config: Config, rate: int, seconds: float,
               writer_url: str | None = None) -> list[float]:
    writer = open_writer(config, redis.Redis.from_url(writer_url or config.redis_url))
    stop = threading.Event()
    thread = threading.Thread(target=writer.run, args=(stop,))
    thread.start()
    sent: list[tuple[tuple[int, int], float]] = []
    committed_at: dict[int, float] = {}
    watcher = threading.Thread(target=_watch,
                               args=(config, writer_url, sent, committed_at, stop))
    watcher.start()
    with MemoryClient(config=config) as client:
        interval, start = 1.0 / rate, time.perf_counter()
        for i in range(int(rate * seconds)):
            time.sleep(max(0.0, start + i * interval - time.perf_counter()))
            client.append("lag", "user", chat_text(i))
            sent.append((client.outbox.last_sent or (0, 0), time.perf_counter()))
        client.flush(timeout=60)
    time.sleep(0.05)
    stop.set()
    watcher.join()
    thread.join()
    writer.close()
    return [(committed_at[i] - t) * 1000 for i, (_, t) in enumerate(sent) if i in committed_at]


def _watch(config: Config, writer_url: str | None, sent: list[tuple[tuple[int, int], float]],
           committed_at: dict[int, float], stop: threading.Event) -> None:
    # The commit position of what the bench's client sends (its role's queue or stream).
    key = commit_key(STREAM_OF_ROLE[acl.role_of(redis.Redis.from_url(config.redis_url))])
    client = redis.Redis.from_url(writer_url or config.redis_url)
    next_index = 0
    while not stop.is_set():
        value = client.get(key)
        now = time.perf_counter()
        if value is not None:
            position = stream_position(value)
            while next_index < len(sent) and sent[next_index][0] <= position:
                committed_at[next_index] = now
                next_index += 1
        time.sleep(0.001)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--messages", type=int, default=50_000)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--rate", type=int, default=1000)
    parser.add_argument("--seconds", type=float, default=10.0)
    parser.add_argument("--role", choices=("admin", "agent"), default="admin",
                        help="whose credentials the client sends with (see the module)")
    args = parser.parse_args()
    print(f"messages per round:       {args.messages:,} (client role: {args.role})")
    ratios, relay = [], []
    with private_redis() as url, scratch_dir() as tmp:
        client_url = _role_url(url, args.role)
        for round_ in range(1, args.rounds + 1):
            config = Config(redis_url=client_url, db_path=str(tmp / f"e2e-{round_}.db"))
            e2e = end_to_end(config, args.messages, url)
            _fresh(url, args.role)  # a keyspace is bound to one database at a time
            raw = raw_apsw(tmp / f"raw-{round_}.db", args.messages)
            ratios.append(e2e / raw)
            line = (f"round {round_}: end to end {e2e:,.0f} messages/s committed, "
                    f"raw apsw (batches 1000) {raw:,.0f} rows/s, ratio {e2e / raw:.2f}")
            if args.role == "agent":
                admin = end_to_end(config.replace(redis_url=url,
                                                  db_path=str(tmp / f"adm-{round_}.db")),
                                   args.messages)
                relay.append(e2e / admin)
                line += f"; as admin {admin:,.0f}/s, agent / admin {e2e / admin:.2f}"
            _fresh(url, args.role)
            print(line)
        lags = commit_lag(config.replace(db_path=str(tmp / "lag.db")), args.rate, args.seconds,
                          url)
    print(f"ratio end to end / raw:   {statistics.median(ratios):.2f} (median of {args.rounds})")
    if relay:
        print(f"ratio agent / admin:      {statistics.median(relay):.2f} (the relay's cost; "
              f"median of {args.rounds})")
    print(f"commit lag at {args.rate}/s for {args.seconds:g}s "
          f"({len(lags)} messages): p50 {percentile(lags, 50):.1f} ms, "
          f"p99 {percentile(lags, 99):.1f} ms")


_PASSWORDS = acl.new_passwords()


def _role_url(url: str, role: str) -> str:
    """The private Redis's URL for ``role``: memq's ACL users are made there first."""
    if role == "admin":
        return url
    acl.set_users(redis.Redis.from_url(url), _PASSWORDS)
    return acl.role_url(url, Role(role), _PASSWORDS[Role(role)])


def _fresh(url: str, role: str) -> None:
    """An empty keyspace for the next round, with the ACL users back (ACLs are not keys,
    but FLUSHALL is the cleanest way to forget the rounds' streams and marks)."""
    redis.Redis.from_url(url).flushall()
    _role_url(url, role)


if __name__ == "__main__":
    main()
