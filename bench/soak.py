"""Bounded under sustained load: a backlog of short messages through the whole stack.

    .venv/bin/python bench/soak.py [--messages 100000] [--keep-inbox 60] [--sample 2]

Starts ``memq up`` in a scratch directory (private Redis, the writer, one embed worker
per core left, the scheduler, and Litestream replicating to a directory: ``[replication]``
on, so the writer keeps acknowledged inbox entries for ``--keep-inbox`` seconds), pushes
``--messages`` short chat messages as an agent (500 per round trip, as fast as Redis takes
them: embedding falls behind, a backlog is the point), and waits until every message is
committed and embedded. Then it waits, sampling on, for Redis to come back to where it
started: inbox entries go once older than the window, RQ job data once a job ends and its
result once its TTL (60 s) runs out.

Every ``--sample`` seconds it records Redis ``used_memory``, the database's size (file and
WAL) with the number of events applied, and the resident memory of each process of the
stack; it prints each curve's start, peak and end. The baseline is the same stack, idle,
measured in the same run before the first message.
"""

from __future__ import annotations

import argparse
import os
import signal
import subprocess
import sys
import threading
import time
from collections import defaultdict
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import redis

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.common import chat_text, scratch_dir
from memq import MemoryClient, names
from memq.config import DEFAULT_MODEL_DIR
from memq.store.connection import open_connection
from memq.store.read.status import database

MB = 1024 * 1024
BATCH = 500
"""Messages per round trip to Redis."""


@dataclass
class Sample:
    t: float
    redis_bytes: int
    db_bytes: int
    logical_bytes: int
    events: int
    rss: dict[str, int]


@dataclass
class Curves:
    samples: list[Sample] = field(default_factory=list)
    lock: threading.Lock = field(default_factory=threading.Lock)

    def add(self, sample: Sample) -> None:
        with self.lock:
            self.samples.append(sample)

    def copy(self) -> list[Sample]:
        with self.lock:
            return list(self.samples)


class Stack:
    """``memq up`` in ``root``, with a replica beside its data directory."""

    def __init__(self, root: Path, keep_inbox_s: float) -> None:
        self.data = root / "data"
        self.db_path = self.data / "memq.db"
        settings = root / "memq.toml"
        model_dir = (os.environ.get("MEMQ_EMBED_MODEL_DIR")
                     or str(Path(DEFAULT_MODEL_DIR).resolve()))
        settings.write_text(
            f'[embed]\nmodel_dir = "{model_dir}"\n'
            f'[replication]\nurl = "{(root / "replica").as_uri()}"\n'
            f"keep_inbox_s = {keep_inbox_s}\n")
        self.log = (root / "up.log").open("wb")
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "memq", "up", "--config", str(settings), "--db",
             str(self.db_path)], stdout=self.log, stderr=subprocess.STDOUT,
            env={**os.environ, "MEMQ_LOG_FORMAT": "json"})
        self.admin = redis.Redis.from_url(self._url("admin"))

    def _url(self, role: str) -> str:
        path = self.data / f"{role}.url"
        wait_for(path.exists, "memq up to write its URL files", 120, self.proc)
        return path.read_text().strip()

    def agent_url(self) -> str:
        return self._url("agent")

    def wait_ready(self) -> None:
        wait_for(lambda: bool(self.admin.exists(names.WRITER_HEARTBEAT_KEY)),
                 "the writer's first heartbeat", 120, self.proc)

    def processes(self) -> dict[str, int]:
        """The stack's processes by name (``memq up``'s children), pid."""
        found = {}
        for pid in children(self.proc.pid):
            name = process_name(pid)
            if name:
                found[name] = pid
        return found

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(120)
            except subprocess.TimeoutExpired:
                self.proc.kill()
        self.log.close()


def wait_for(condition: Callable[[], bool], what: str, timeout: float,
             proc: subprocess.Popen[bytes] | None = None) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        if proc is not None and proc.poll() is not None:
            raise SystemExit(f"memq up exited ({proc.returncode}) while waiting for {what}")
        if time.monotonic() > deadline:
            raise SystemExit(f"gave up after {timeout:g} s waiting for {what}")
        time.sleep(0.2)


def children(parent: int) -> list[int]:
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text()
        except OSError:
            continue
        if int(stat.rsplit(")", 1)[1].split()[1]) == parent:
            found.append(int(entry.name))
    return found


def process_name(pid: int) -> str | None:
    try:
        argv = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
    except OSError:
        return None
    words = [a.decode(errors="replace") for a in argv if a]
    if words and "redis-server" in words[0]:
        return "redis"
    if "-m" in words and "memq" in words:
        rest = words[words.index("memq") + 1:]
        return " ".join(rest[:2]) if rest[:1] == ["worker"] else (rest[0] if rest else None)
    return Path(words[0]).name if words else None


def rss_bytes(pid: int) -> int:
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) * 1024
    except OSError:
        pass
    return 0


def db_bytes(path: Path) -> int:
    return sum(p.stat().st_size for p in (path, Path(f"{path}-wal")) if p.exists())


def logical_bytes(path: Path) -> int:
    """The database's own size (pages in use, the WAL's newest included): the files on disk
    also count pages twice while the WAL holds copies Litestream has not let go yet."""
    conn = open_connection(path, readonly=True)
    try:
        return int(conn.pragma("page_count")) * int(conn.pragma("page_size"))
    finally:
        conn.close()


class Sampler(threading.Thread):
    def __init__(self, stack: Stack, curves: Curves, every_s: float) -> None:
        super().__init__(daemon=True)
        self.stack, self.curves, self.every_s = stack, curves, every_s
        self.stop = threading.Event()
        self.started = time.monotonic()

    def run(self) -> None:
        while not self.stop.is_set():
            self.curves.add(self.sample())
            self.stop.wait(self.every_s)

    def sample(self) -> Sample:
        memory = self.stack.admin.info("memory")
        applied = self.stack.admin.hget(names.WRITER_STATS_KEY, "events_applied")
        rss = {name: rss_bytes(pid) for name, pid in self.stack.processes().items()}
        return Sample(time.monotonic() - self.started, int(memory["used_memory"]),
                      db_bytes(self.stack.db_path), logical_bytes(self.stack.db_path),
                      int(applied or 0), rss)


def push(stack: Stack, count: int) -> float:
    """Send ``count`` short messages as an agent; the seconds it took."""
    started = time.perf_counter()
    with MemoryClient(redis_url=stack.agent_url(), db_path=str(stack.db_path)) as client:
        for first in range(0, count, BATCH):
            with client.batched():
                for i in range(first, min(count, first + BATCH)):
                    client.append(f"soak-{i % 100}", "user", chat_text(i))
        client.flush(3600)
    return time.perf_counter() - started


def drained(stack: Stack, count: int) -> bool:
    messages = database(stack.db_path)["messages"]
    return bool(messages["total"] >= count and messages["pending"] == 0)


def back_to_baseline(stack: Stack, baseline: int) -> bool:
    return int(stack.admin.info("memory")["used_memory"]) <= baseline * 1.10 + 256 * 1024


def report(curves: list[Sample], baseline: int, marks: dict[str, float]) -> None:
    first, last = curves[0], curves[-1]
    peak = max(curves, key=lambda s: s.redis_bytes)
    print(f"redis used_memory: start {first.redis_bytes / MB:.1f} MB (baseline "
          f"{baseline / MB:.1f} MB), peak {peak.redis_bytes / MB:.1f} MB at {peak.t:.0f} s, "
          f"end {last.redis_bytes / MB:.1f} MB ({last.redis_bytes / baseline:.2f}x baseline)")
    print(f"database (file + WAL): start {first.db_bytes / MB:.1f} MB, peak "
          f"{max(s.db_bytes for s in curves) / MB:.1f} MB, end {last.db_bytes / MB:.1f} MB; "
          f"its pages: end {last.logical_bytes / MB:.1f} MB, "
          f"{last.logical_bytes / max(1, last.events):,.0f} bytes/event")
    committed_at = marks["committed"]
    for label, phase in (("appends", [c for c in curves if c.t <= committed_at]),
                         ("embeddings", [c for c in curves if c.t >= committed_at])):
        growth = _growth(phase)
        if growth is not None:
            print(f"database growth while committing {label}: {growth[0]:,.0f} bytes/event in "
                  f"the first half, {growth[1]:,.0f} in the second (ratio "
                  f"{growth[1] / growth[0]:.2f}; 1 = linear)")
    series: dict[str, list[int]] = defaultdict(list)
    for sample in curves:
        for name, value in sample.rss.items():
            series[name].append(value)
    for name, values in sorted(series.items()):
        print(f"rss {name:<18} start {values[0] / MB:7.1f} MB, peak {max(values) / MB:7.1f} MB, "
              f"end {values[-1] / MB:7.1f} MB")
    print("timeline: " + ", ".join(f"{k} {v:.0f} s" for k, v in marks.items()))


def _growth(phase: list[Sample]) -> tuple[float, float] | None:
    """Bytes per event applied over the first and the second half of a phase."""
    if len(phase) < 3 or phase[-1].events == phase[0].events:
        return None
    middle = phase[0].events + (phase[-1].events - phase[0].events) // 2
    mid = next(s for s in phase if s.events >= middle)
    halves = ((phase[0], mid), (mid, phase[-1]))
    if any(b.events == a.events for a, b in halves):
        return None
    first, second = ((b.logical_bytes - a.logical_bytes) / (b.events - a.events)
                     for a, b in halves)
    return (first, second) if first > 0 else None


def run(args: argparse.Namespace, root: Path) -> None:
    stack = Stack(root, args.keep_inbox)
    curves = Curves()
    try:
        stack.wait_ready()
        time.sleep(args.sample * 2)  # the idle stack settles: its baseline
        baseline = int(stack.admin.info("memory")["used_memory"])
        sampler = Sampler(stack, curves, args.sample)
        sampler.start()
        pushed = push(stack, args.messages)
        print(f"soak: {args.messages:,} messages pushed and committed in {pushed:.1f} s "
              f"({args.messages / pushed:,.0f}/s)")
        marks = {"committed": time.monotonic() - sampler.started}
        wait_for(lambda: drained(stack, args.messages), "every message embedded",
                 args.drain_timeout, stack.proc)
        marks["embedded"] = time.monotonic() - sampler.started
        settled = time.monotonic()
        # The inbox window, the RQ result TTL, a margin (or what --settle says).
        window = args.settle if args.settle is not None else args.keep_inbox + 60 + 30
        while not back_to_baseline(stack, baseline) and time.monotonic() - settled < window:
            time.sleep(args.sample)
        back = back_to_baseline(stack, baseline)
        marks["redis back to baseline" if back else "redis not back yet"] = (
            time.monotonic() - sampler.started)
        sampler.stop.set()
        sampler.join()
        curves.add(sampler.sample())
        report(curves.copy(), baseline, marks)
        print(f"redis back to its baseline within {window:.0f} s of the drain: "
              f"{'yes' if back else 'no'} (inbox kept {args.keep_inbox:g} s, "
              "RQ results 60 s)")
    finally:
        stack.stop()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--messages", type=int, default=100_000)
    parser.add_argument("--keep-inbox", type=float, default=60.0,
                        help="[replication] keep_inbox_s for the run (at least 10)")
    parser.add_argument("--sample", type=float, default=2.0, help="seconds between samples")
    parser.add_argument("--drain-timeout", type=float, default=3 * 3600.0)
    parser.add_argument("--settle", type=float, default=None,
                        help="seconds to wait for Redis to come back to its baseline after "
                             "the drain (default: the inbox window + the RQ result TTL + 30)")
    args = parser.parse_args()
    with scratch_dir() as root:
        run(args, root)


if __name__ == "__main__":
    main()
