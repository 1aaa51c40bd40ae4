"""Embedding throughput: the whole pipeline against raw fastembed, measured in the same run.

    PYTHONPATH=. python bench/embed.py [--messages 5000] [--batch 64]

(the model files from ``memq fetch-model``, or wherever MEMQ_EMBED_MODEL_DIR points).

1. raw: fastembed alone embeds the texts (same model files, batch size and threads);
2. pipeline, one worker: a backlog of messages committed by a real ``memq writer``
   (so their embed jobs are queued), then one ``memq worker embed --burst`` process;
   the clock runs until the last vector is committed to SQLite;
3. raw again (the machine is shared: bracketing the pipeline shows the drift);
4. pipeline, two workers, on a fresh database;
5. raw with two threads: what one process gets from both cores;
6. the embed job under a SimpleWorker in this process, timing the model inside it: the
   share of the worker's time spent outside the model (RQ, Redis, building events) is
   measured with both clocks running at once, so other load on the machine cannot skew it.

Threads are set on purpose: every process runs with OMP/OPENBLAS/MKL_NUM_THREADS=1 and
the model with one onnxruntime thread (``[embed] threads = 1``), so one worker uses one
core and two workers use the two cores this machine has. Two workers cannot do better
than twice one core, and the writer and Redis share those same cores.

Texts are LoCoMo conversation turns (../shared/data/locomo-dev.json, chat messages of
realistic length), cycled to the number asked; synthetic chat lines when it is absent.
"""

from __future__ import annotations

import os

for _var in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS"):
    os.environ[_var] = "1"  # before numpy and onnxruntime load: see the docstring

import argparse  # noqa: E402 - the thread settings above must come first
import json  # noqa: E402
import resource  # noqa: E402
import shutil  # noqa: E402
import socket  # noqa: E402
import subprocess  # noqa: E402
import sys  # noqa: E402
import tempfile  # noqa: E402
import time  # noqa: E402
from collections.abc import Callable  # noqa: E402
from dataclasses import dataclass  # noqa: E402
from pathlib import Path  # noqa: E402

import apsw  # noqa: E402
import redis  # noqa: E402

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from memq import names  # noqa: E402
from memq.config import DEFAULT_MODEL_NAME  # noqa: E402
from producers import MemoryClient  # noqa: E402
from store import embed_jobs  # noqa: E402

LOCOMO = ROOT.parent / "shared" / "data" / "locomo-dev.json"
MODEL_DIR = Path(os.environ.get("MEMQ_EMBED_MODEL_DIR", ROOT / "models" / "all-MiniLM-L6-v2"))


def texts(count: int) -> list[str]:
    turns: list[str] = []
    if LOCOMO.is_file():
        for conversation in json.loads(LOCOMO.read_text()):
            for key, session in conversation["conversation"].items():
                if key.startswith("session_") and isinstance(session, list):
                    turns.extend(turn["text"] for turn in session if turn.get("text"))
    if not turns:
        turns = [f"Message {i}: could you remind me what we decided about the trip to "
                 f"Lisbon, and whether the hotel near the river was still available?"
                 for i in range(500)]
    return [turns[i % len(turns)] for i in range(count)]


# -- raw fastembed -----------------------------------------------------------------------


@dataclass
class Raw:
    messages: int
    wall_s: float
    cpu_s: float

    @property
    def rate(self) -> float:
        return self.messages / self.wall_s


def raw(items: list[str], batch: int, threads: int) -> Raw:
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    from fastembed import TextEmbedding

    model = TextEmbedding(DEFAULT_MODEL_NAME, specific_model_path=str(MODEL_DIR),
                          threads=threads)
    list(model.embed(items[:batch], batch_size=batch))  # warm up
    started, cpu = time.perf_counter(), time.process_time()
    vectors = list(model.embed(items, batch_size=batch))
    result = Raw(len(items), time.perf_counter() - started, time.process_time() - cpu)
    assert len(vectors) == len(items)
    return result


# -- the pipeline --------------------------------------------------------------------------


class Stack:
    """A private redis-server, a database and a ``memq writer`` in a temporary directory."""

    def __init__(self, batch: int) -> None:
        self.dir = Path(tempfile.mkdtemp(prefix="memq-bench-"))
        with socket.socket() as sock:
            sock.bind(("127.0.0.1", 0))
            self.port = sock.getsockname()[1]
        self.url = f"redis://127.0.0.1:{self.port}/0"
        self.db = self.dir / "memq.db"
        (self.dir / "memq.toml").write_text(
            f"[embed]\nthreads = 1\nbatch_size = {batch}\njob_batch_size = {batch}\n")
        self.env = {**os.environ, "MEMQ_CONFIG": str(self.dir / "memq.toml"),
                    "MEMQ_REDIS_URL": self.url, "MEMQ_DB": str(self.db),
                    "MEMQ_EMBED_MODEL_DIR": str(MODEL_DIR), "PYTHONPATH": str(ROOT)}
        self.procs: list[subprocess.Popen[bytes]] = []

    def start(self, *, writer: bool = True) -> None:
        binary = shutil.which("redis-server") or sys.exit("redis-server is not installed")
        self.procs.append(subprocess.Popen(
            [binary, "--port", str(self.port), "--bind", "127.0.0.1", "--save", "",
             "--appendonly", "no", "--dir", str(self.dir)], stdout=subprocess.DEVNULL))
        client = redis.Redis.from_url(self.url)
        _wait(lambda: _pings(client), "redis-server to start")
        if writer:
            self.procs.append(self.memq("writer"))

    def memq(self, *args: str) -> subprocess.Popen[bytes]:
        return subprocess.Popen([sys.executable, "-m", "memq", *args], cwd=ROOT, env=self.env,
                                stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)

    def stop(self) -> None:
        for proc in reversed(self.procs):
            proc.terminate()
            proc.wait(30)
        shutil.rmtree(self.dir, ignore_errors=True)


@dataclass
class Run:
    workers: int
    messages: int
    end_to_end_s: float  # from launching the workers to the last vector committed
    steady_s: float  # from the first vector committed to the last
    steady_messages: int
    worker_cpu_s: float  # user + system time of the worker processes, start-up included

    @property
    def end_to_end_rate(self) -> float:
        return self.messages / self.end_to_end_s

    @property
    def steady_rate(self) -> float:
        return self.steady_messages / self.steady_s


def pipeline(items: list[str], batch: int, workers: int) -> Run:
    stack = Stack(batch)
    stack.start()
    try:
        broker = redis.Redis.from_url(stack.url)
        _fill_backlog(stack, broker, items)
        cpu_before = _children_cpu()
        launched = time.perf_counter()
        procs = [stack.memq("worker", "embed", "--burst") for _ in range(workers)]
        first_at, first_count, done_at = _watch(stack.db, len(items))
        for proc in procs:
            proc.wait(600)
        return Run(workers, len(items), done_at - launched, done_at - first_at,
                   len(items) - first_count, _children_cpu() - cpu_before)
    finally:
        stack.stop()


def worker_overhead(items: list[str], batch: int) -> tuple[float, float]:
    """Run the embed job in this process under a SimpleWorker, as ``memq worker`` does, and
    time what the model takes; returns (seconds in the worker, seconds in the model).

    Both clocks run at once in one process, so load from elsewhere cannot skew the share.
    """
    from memq.config import Config, EmbedConfig
    from memq.embedding import Embedder
    from workers import context
    from workers.embed import embedder
    from workers.queues import worker

    stack = Stack(batch)
    stack.start(writer=False)  # the results stay in the inbox: only the worker is timed
    original = Embedder.embed
    try:
        broker = redis.Redis.from_url(stack.url)
        config = Config(redis_url=stack.url, embed=EmbedConfig(
            model_dir=str(MODEL_DIR), threads=1, batch_size=batch, job_batch_size=batch))
        context.install(context.WorkerContext(config, broker))
        embedder(config.embed).load()
        embed_jobs.enqueue(broker, DEFAULT_MODEL_NAME,
                           [(f"m{i}", text) for i, text in enumerate(items)], batch)
        in_model = [0.0]

        def timed(self: Embedder, texts: list[str]) -> object:
            started = time.perf_counter()
            try:
                return original(self, texts)
            finally:
                in_model[0] += time.perf_counter() - started

        Embedder.embed = timed  # type: ignore[method-assign,assignment]
        started = time.perf_counter()
        worker([names.QUEUE_EMBED], broker).work(burst=True, logging_level="WARNING")
        return time.perf_counter() - started, in_model[0]
    finally:
        Embedder.embed = original  # type: ignore[method-assign]
        stack.stop()


def _fill_backlog(stack: Stack, broker: redis.Redis, items: list[str]) -> None:
    os.environ.update({k: stack.env[k] for k in ("MEMQ_REDIS_URL", "MEMQ_DB", "MEMQ_CONFIG")})
    _wait(stack.db.exists, "the writer to create the database")
    with MemoryClient.from_env() as client:
        with client.batched():
            for i, text in enumerate(items):
                client.append(f"bench-{i // 100}", "user" if i % 2 else "assistant", text)
        client.flush(timeout=120)
    total = len(items)
    _wait(lambda: len(embed_jobs.in_flight(broker, DEFAULT_MODEL_NAME)) == total,
          "the writer to enqueue every embed job")


def _watch(db: Path, total: int) -> tuple[float, int, float]:
    """Poll the database: when the first vectors landed (and how many), and the last."""
    conn = apsw.Connection(str(db), flags=apsw.SQLITE_OPEN_READONLY)
    first_at, first_count = 0.0, 0
    while True:
        count = conn.execute(
            "SELECT count(*) FROM messages WHERE embedding IS NOT NULL").fetchone()[0]
        now = time.perf_counter()
        if count and not first_at:
            first_at, first_count = now, count
        if count >= total:
            conn.close()
            return first_at, first_count, now
        time.sleep(0.05)


def _children_cpu() -> float:
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)  # children waited for so far
    return usage.ru_utime + usage.ru_stime


def _pings(client: redis.Redis) -> bool:
    try:
        return bool(client.ping())
    except redis.ConnectionError:
        return False


def _wait(condition: Callable[[], bool], what: str, timeout: float = 300.0) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > deadline:
            sys.exit(f"gave up waiting for {what}")
        time.sleep(0.05)


# -- report --------------------------------------------------------------------------------


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--messages", type=int, default=5000)
    parser.add_argument("--batch", type=int, default=64)
    args = parser.parse_args()
    items = texts(args.messages)
    mean_chars = sum(map(len, items)) / len(items)
    print(f"{len(items)} messages, mean {mean_chars:.0f} characters, batch {args.batch}; "
          f"1 onnxruntime thread per process, OMP/BLAS threads 1, {os.cpu_count()} cores")
    before = raw(items, args.batch, threads=1)
    print(f"raw fastembed, 1 thread:        {before.rate:7.1f} msg/s")
    one = pipeline(items, args.batch, workers=1)
    _print_run(one)
    after = raw(items, args.batch, threads=1)
    raw_rate = (before.rate + after.rate) / 2
    raw_cpu_ms = (before.cpu_s + after.cpu_s) / (before.messages + after.messages) * 1000
    print(f"raw fastembed, 1 thread, again: {after.rate:7.1f} msg/s (mean {raw_rate:.1f})")
    two = pipeline(items, args.batch, workers=2)
    _print_run(two)
    both = raw(items, args.batch, threads=2)
    print(f"raw fastembed, 2 threads:       {both.rate:7.1f} msg/s")
    overhead_total, overhead_model = worker_overhead(items, args.batch)
    print()
    print(f"pipeline / raw, 1 worker:  steady {one.steady_rate / raw_rate:6.1%}   "
          f"end to end {one.end_to_end_rate / raw_rate:6.1%}   (goal >= 85%)")
    print(f"CPU per message, 1 worker: {one.worker_cpu_s / one.messages * 1000:.2f} ms "
          f"(start-up and model load included), raw {raw_cpu_ms:.2f} ms: "
          f"{raw_cpu_ms / (one.worker_cpu_s / one.messages * 1000):.1%} efficient")
    print(f"in-process worker:         {overhead_model / overhead_total:6.1%} of the worker's "
          f"time is the model ({overhead_total - overhead_model:.2f} s of "
          f"{overhead_total:.1f} s elsewhere: RQ, Redis, events)")
    print(f"2 workers / 1 worker:      steady {two.steady_rate / one.steady_rate:5.2f}x  "
          f"end to end {two.end_to_end_rate / one.end_to_end_rate:5.2f}x")
    print(f"2 workers / raw 2 threads: steady {two.steady_rate / both.rate:6.1%}")
    print(f"On {os.cpu_count()} cores two single-threaded workers can at best double one; "
          "the writer, Redis and this process share the same cores, and so does any other "
          "load on the machine ('cores busy' above shows what the workers actually got).")


def _print_run(run: Run) -> None:
    label = f"pipeline, {run.workers} worker{'s' if run.workers > 1 else ''}:"
    print(f"{label:<32}{run.steady_rate:7.1f} msg/s steady, "
          f"{run.end_to_end_rate:7.1f} msg/s end to end ({run.end_to_end_s:.1f} s, of which "
          f"{run.end_to_end_s - run.steady_s:.1f} s to the first committed vectors)")
    print(f"{'':<32}worker CPU {run.worker_cpu_s / run.messages * 1000:.2f} ms/msg, "
          f"{run.worker_cpu_s / run.end_to_end_s:.2f} cores busy on average "
          f"(load average now {os.getloadavg()[0]:.1f})")


if __name__ == "__main__":
    main()
