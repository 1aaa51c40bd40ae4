"""Embedding throughput on an agent's stream: memq's pipeline against raw fastembed.

    .venv/bin/python bench/embed.py [--mix agent|chat] [--messages 600] [--workers 2]
                                    [--data ../shared/data/locomo-dev.json]

(the model files from ``memq fetch-model``, or wherever MEMQ_EMBED_MODEL_DIR points).

``--mix agent`` (the default) is the stream of ``bench/agent_mix.py``, seeded: 70%
conversation turns, 10% one-word replies, 20% tool outputs of 20-60 log lines; ``--mix
chat`` is conversation turns only. Every run, one after the other on the same texts:

1. raw: fastembed alone embeds the texts in arrival order, as a worker without memq's
   batching would: batches of 64, each padded to its longest text, texts read up to the
   512 tokens of the tokenizer files;
2. the pipeline with one worker: the messages are appended through ``MemoryClient`` and
   committed by a real ``memq writer`` (which queues their embed jobs), then one
   ``memq worker embed --burst`` process runs; the clock runs from the worker's start to
   the last vector committed to SQLite ("steady" starts at the first vector committed,
   leaving out the model's load);
3. the pipeline with ``--workers`` workers, on a fresh database;
4. the embed job under a SimpleWorker in this process, timing the model inside it: the
   share of the worker's time spent in the model, in counting tokens to plan batches,
   and elsewhere (RQ, Redis, building events). Both clocks run in one process at once, so
   other load on the machine cannot skew the share.

Every process runs with one onnxruntime thread (``[embed] threads = 1``), a one-thread
tokenizer and OMP/OPENBLAS/MKL_NUM_THREADS=1: one worker uses one core. The machine is
shared, so besides messages/s each run reports CPU seconds per message, which other load
disturbs far less; the ratios to raw of both are printed.
"""

from __future__ import annotations

import os

for _var in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS"):
    os.environ[_var] = "1"  # before numpy and onnxruntime load: see the docstring
os.environ["TOKENIZERS_PARALLELISM"] = "false"

import argparse  # noqa: E402 - the thread settings above must come first
import resource  # noqa: E402
import shutil  # noqa: E402
import subprocess  # noqa: E402
import sys  # noqa: E402
import tempfile  # noqa: E402
import time  # noqa: E402
from collections import Counter  # noqa: E402
from collections.abc import Callable  # noqa: E402
from dataclasses import dataclass  # noqa: E402
from pathlib import Path  # noqa: E402

import apsw  # noqa: E402
import redis  # noqa: E402

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from bench.agent_mix import LOCOMO, agent_mix, chat_turns, uses_locomo  # noqa: E402
from bench.common import free_port  # noqa: E402
from memq import MemoryClient, names  # noqa: E402
from memq.config import DEFAULT_MODEL_NAME  # noqa: E402
from memq.store.dispatch import embed_jobs  # noqa: E402

MODEL_DIR = Path(os.environ.get("MEMQ_EMBED_MODEL_DIR", ROOT / "models" / "all-MiniLM-L6-v2"))
RAW_BATCH = 64
"""fastembed's batch in the raw run: memq's default ``[embed] batch_size``."""


@dataclass
class Figures:
    """One run: messages, wall-clock seconds and CPU seconds spent on them."""

    label: str
    messages: int
    wall_s: float
    cpu_s: float

    @property
    def rate(self) -> float:
        return self.messages / self.wall_s

    @property
    def cpu_ms(self) -> float:
        return self.cpu_s / self.messages * 1000


# -- raw fastembed -----------------------------------------------------------------------


def raw(items: list[str]) -> Figures:
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    from fastembed import TextEmbedding

    model = TextEmbedding(DEFAULT_MODEL_NAME, specific_model_path=str(MODEL_DIR), threads=1)
    list(model.embed(items[:8], batch_size=RAW_BATCH))  # warm up
    started, cpu = time.perf_counter(), time.process_time()
    vectors = list(model.embed(items, batch_size=RAW_BATCH))
    figures = Figures("raw fastembed, arrival order", len(items),
                      time.perf_counter() - started, time.process_time() - cpu)
    assert len(vectors) == len(items)
    return figures


# -- the pipeline --------------------------------------------------------------------------


class Stack:
    """A private redis-server, a database and a ``memq writer`` in a temporary directory."""

    def __init__(self) -> None:
        self.dir = Path(tempfile.mkdtemp(prefix="memq-bench-"))
        self.url = f"redis://127.0.0.1:{free_port()}/0"
        self.db = self.dir / "memq.db"
        (self.dir / "memq.toml").write_text("[embed]\nthreads = 1\n")
        self.env = {**os.environ, "MEMQ_CONFIG": str(self.dir / "memq.toml"),
                    "MEMQ_REDIS_URL": self.url, "MEMQ_DB": str(self.db),
                    "MEMQ_EMBED_MODEL_DIR": str(MODEL_DIR), "PYTHONPATH": str(ROOT)}
        self.procs: list[subprocess.Popen[bytes]] = []

    def start(self, *, writer: bool = True) -> None:
        binary = shutil.which("redis-server") or sys.exit("redis-server is not installed")
        port = self.url.rsplit(":", 1)[1].split("/")[0]
        self.procs.append(subprocess.Popen(
            [binary, "--port", port, "--bind", "127.0.0.1", "--save", "",
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


def pipeline(items: list[str], workers: int) -> tuple[Figures, Figures]:
    """(end to end, steady) figures of ``workers`` ``memq worker embed`` processes."""
    stack = Stack()
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
        cpu = _children_cpu() - cpu_before
    finally:
        stack.stop()
    label = f"pipeline, {workers} worker{'s' if workers > 1 else ''}"
    # The workers' CPU includes starting Python and loading the model: the CPU figure is
    # given end to end only, and errs against the pipeline.
    end_to_end = Figures(label, len(items), done_at - launched, cpu)
    if first_count >= len(items):
        # Every vector landed in the first commit seen (a small run): no steady stretch
        # to measure, so the end-to-end figure stands for it.
        return end_to_end, end_to_end
    steady = Figures(label, len(items) - first_count, done_at - first_at, cpu)
    return end_to_end, steady


def _fill_backlog(stack: Stack, broker: redis.Redis, items: list[str]) -> None:
    os.environ.update({k: stack.env[k] for k in ("MEMQ_REDIS_URL", "MEMQ_DB", "MEMQ_CONFIG")})
    _wait(lambda: bool(broker.exists(names.WRITER_HEARTBEAT_KEY)), "the writer to start")
    with MemoryClient.from_env() as client:
        with client.batched():
            for i, text in enumerate(items):
                client.append(f"bench-{i // 100}", "tool" if "\n" in text else
                              ("user" if i % 2 else "assistant"), text)
        client.flush(timeout=120)
    total = len(items)
    _wait(lambda: len(embed_jobs.in_flight(broker, DEFAULT_MODEL_NAME)) == total,
          "the writer to enqueue every embed job")


def _watch(db: Path, total: int) -> tuple[float, int, float]:
    """Poll the database: when the first vectors landed (and how many), and the last."""
    conn = apsw.Connection(str(db), flags=apsw.SQLITE_OPEN_READONLY)
    first_at, first_count = 0.0, 0
    deadline = time.monotonic() + 1800
    while time.monotonic() < deadline:
        count = int(conn.execute(  # type: ignore[arg-type]  # count(*) is an integer
            "SELECT count(*) FROM messages WHERE embedding IS NOT NULL").fetchall()[0][0])
        now = time.perf_counter()
        if count and not first_at:
            first_at, first_count = now, count
        if count >= total:
            conn.close()
            return first_at, first_count, now
        time.sleep(0.05)
    sys.exit("gave up waiting for the vectors")


# -- where a worker's time goes --------------------------------------------------------------


@dataclass
class Share:
    worker_s: float
    model_s: float
    counting_s: float


def worker_share(items: list[str]) -> Share:
    """Run the embed jobs in this process under a SimpleWorker, as ``memq worker`` does,
    timing the model's batches and the token counting that plans them."""
    from memq.config import Config, EmbedConfig
    from memq.embedding import Embedder
    from memq.workers import context
    from memq.workers.embed import embedder
    from memq.workers.queues import worker

    stack = Stack()
    stack.start(writer=False)  # the results stay in the inbox: only the worker is timed
    timers = {"_run": 0.0, "token_counts": 0.0}
    originals = {name: getattr(Embedder, name) for name in timers}

    def timed(name: str) -> Callable[..., object]:
        def call(self: Embedder, texts: list[str]) -> object:
            started = time.perf_counter()
            try:
                return originals[name](self, texts)
            finally:
                timers[name] += time.perf_counter() - started
        return call

    try:
        broker = redis.Redis.from_url(stack.url)
        config = Config(redis_url=stack.url, embed=EmbedConfig(model_dir=str(MODEL_DIR)))
        context.install(context.WorkerContext(config, broker))
        embedder(config.embed).load()
        embed_jobs.enqueue(broker, DEFAULT_MODEL_NAME,
                           [(f"m{i}", text) for i, text in enumerate(items)],
                           config.embed.job_batch_size)
        for name in timers:
            setattr(Embedder, name, timed(name))
        started = time.perf_counter()
        worker([names.QUEUE_EMBED], broker).work(burst=True, logging_level="WARNING")
        return Share(time.perf_counter() - started, timers["_run"], timers["token_counts"])
    finally:
        for name, original in originals.items():
            setattr(Embedder, name, original)
        stack.stop()


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


def describe(items: list[str], mix: str) -> str:
    kinds = Counter("tool outputs" if "\n" in t else "one-word replies" if " " not in t.strip()
                    else "turns" for t in items)
    shown = ", ".join(f"{n} {kind}" for kind, n in kinds.most_common())
    return (f"--mix {mix}: {len(items)} messages ({shown}); {len(set(items))} distinct; "
            f"mean {sum(map(len, items)) / len(items):,.0f} characters")


def table(raw_run: Figures, runs: list[tuple[Figures, Figures]]) -> list[str]:
    lines = ["| run | messages/s, steady | × raw | end to end | × raw | CPU ms/message "
             "| × raw |", "|---|---|---|---|---|---|---|",
             f"| {raw_run.label} | {raw_run.rate:.1f} | 1.00 | {raw_run.rate:.1f} | 1.00 "
             f"| {raw_run.cpu_ms:.0f} | 1.00 |"]
    for end_to_end, steady in runs:
        lines.append(
            f"| {steady.label} | {steady.rate:.1f} | {steady.rate / raw_run.rate:.2f} "
            f"| {end_to_end.rate:.1f} | {end_to_end.rate / raw_run.rate:.2f} "
            f"| {end_to_end.cpu_ms:.1f} | {raw_run.cpu_ms / end_to_end.cpu_ms:.2f} |")
    return lines


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--mix", choices=("agent", "chat"), default="agent")
    parser.add_argument("--messages", type=int, default=600)
    parser.add_argument("--workers", type=int, default=2, help="workers of the last run")
    parser.add_argument("--seed", type=int, default=17)
    parser.add_argument("--data", type=Path, default=LOCOMO,
                        help="LoCoMo file for the conversation turns (generated without it)")
    args = parser.parse_args()
    if args.messages < 1 or args.workers < 1:
        parser.error("--messages and --workers must be at least 1")
    items = (agent_mix if args.mix == "agent" else chat_turns)(args.messages, args.seed,
                                                               args.data)
    print(describe(items, args.mix) + ("; turns from LoCoMo" if uses_locomo(args.data)
                                       else "; turns generated (no LoCoMo file)"))
    print(f"one thread per process (onnxruntime, tokenizer, BLAS); {os.cpu_count()} cores; "
          f"load average {os.getloadavg()[0]:.1f} at the start")
    raw_run = raw(items)
    runs = [pipeline(items, workers=1)]
    if args.workers > 1:
        runs.append(pipeline(items, workers=args.workers))
    share = worker_share(items)
    print()
    print("\n".join(table(raw_run, runs)))
    print()
    one, many = runs[0][1], runs[-1][1]
    print(f"pipeline, 1 worker / raw fastembed: {one.rate / raw_run.rate:.2f}x messages/s "
          f"steady, {raw_run.cpu_ms / runs[0][0].cpu_ms:.2f}x CPU per message (goal >= 3x)")
    print("(steady: from the first vector committed to the last; end to end and CPU include "
          "each worker's start and model load)")
    if len(runs) > 1:
        print(f"{args.workers} workers / 1 worker: {many.rate / one.rate:.2f}x messages/s")
    rest = share.worker_s - share.model_s - share.counting_s
    print(f"worker time in the model: {share.model_s / share.worker_s:.1%}; counting tokens "
          f"to plan batches {share.counting_s / share.worker_s:.1%}; elsewhere (RQ, Redis, "
          f"events) {rest / share.worker_s:.1%} ({len(items) / share.worker_s:.1f} "
          f"messages/s in process)")
    print(f"load average at the end {os.getloadavg()[0]:.1f}")


if __name__ == "__main__":
    main()
