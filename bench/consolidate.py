"""Consolidation throughput and compression on the development conversations.

Every turn of each LoCoMo development conversation becomes a message of one session
(at its session's date), cut into chunks exactly as the writer would cut them
(``[consolidation]`` defaults). Three figures, measured in the same run:

1. baseline: raw embedding of the very sentences the summariser embeds, one batch per
   chunk — the floor under any embedding-based summariser;
2. the extractive summariser in process (alternating with 1, chunk by chunk): messages
   consolidated per second, and the compression ratio (characters in / characters out,
   header included);
3. the whole pipeline: the messages appended through Redis to a real writer, one
   ``consolidation.requested``, one in-process burst worker, until every summary is
   committed (skipped with ``--no-pipeline``, or when redis-server is missing).

The summariser/baseline ratio shows what selection, key terms and layout cost on top
of the embedding. Threads: the model runs with ``[embed] threads`` (1) and BLAS with one
thread, so the figures are per core.

    PYTHONPATH=. MEMQ_EMBED_MODEL_DIR=models/all-MiniLM-L6-v2 python bench/consolidate.py
"""

from __future__ import annotations

import os

# numpy reads these once, when first imported: set them before anything imports it.
os.environ.setdefault("OMP_NUM_THREADS", "1")
os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")

import argparse
import json
import logging
import shutil
import statistics
import sys
import tempfile
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from memq import names  # noqa: E402
from memq.clock import to_rfc3339  # noqa: E402
from memq.config import Config, ConsolidationConfig, EmbedConfig  # noqa: E402
from memq.embedding import Embedder  # noqa: E402
from memq.store.dispatch.consolidation_jobs import Chunk, chunk_rows  # noqa: E402
from memq.workers.extractive import ExtractiveSummariser, candidate_sentences  # noqa: E402
from memq.workers.summarise import ChunkMessage, check  # noqa: E402

DEFAULT_DATA = ROOT.parent / "shared" / "data" / "locomo-dev.json"


def load_sessions(path: Path, limit: int | None) -> dict[str, list[tuple[str, str, str, str]]]:
    """``{conversation id: [(id, role, content, created_at), ...]}`` in conversation order."""
    conversations = json.loads(path.read_text())[:limit]
    sessions = {}
    for item in conversations:
        c = item["conversation"]
        rows = []
        for n in range(1, 100):
            if f"session_{n}" not in c:
                break
            when = datetime.strptime(c[f"session_{n}_date_time"], "%I:%M %p on %d %B, %Y")
            for i, turn in enumerate(c[f"session_{n}"]):
                role = "user" if turn["speaker"] == c["speaker_a"] else "assistant"
                moment = when.replace(tzinfo=UTC) + timedelta(seconds=30 * i)
                rows.append((f"{item['sample_id']}-{turn['dia_id']}", role, turn["text"],
                             to_rfc3339(moment)))
        sessions[item["sample_id"]] = rows
    return sessions


def make_chunks(sessions: dict[str, list[tuple[str, str, str, str]]],
                limits: ConsolidationConfig) -> list[Chunk]:
    rows = [(sid, *row) for sid, session in sorted(sessions.items()) for row in session]
    return list(chunk_rows(rows, limits))


def as_messages(chunk: Chunk) -> list[ChunkMessage]:
    return [ChunkMessage(**m) for m in chunk.messages]


def bench_in_process(
    embedder: Embedder, summariser: ExtractiveSummariser, chunks: list[Chunk]
) -> tuple[dict[str, float], dict[str, Any]]:
    """Baseline and summariser chunk by chunk, so that a change in the load of a shared
    machine weighs on both alike; which goes first alternates, because the second of two
    runs over the same batch is a few per cent faster (warm runtime buffers)."""
    base_s = summ_s = 0.0
    sentences = chars_in = chars_out = 0
    ratios = []
    for index, chunk in enumerate(chunks):
        messages = as_messages(chunk)
        batch = candidate_sentences(messages)
        if index % 2:
            base_s += _embedding_time(embedder, batch)
        started = time.perf_counter()
        content = check(messages, summariser.summarise(messages))
        summ_s += time.perf_counter() - started
        if not index % 2:
            base_s += _embedding_time(embedder, batch)
        sentences += len(batch)
        chars_in += chunk.chars
        chars_out += len(content)
        ratios.append(chunk.chars / len(content))
    count = sum(len(c.messages) for c in chunks)
    base = {"seconds": base_s, "messages_per_s": count / base_s, "sentences": sentences}
    summ = {"seconds": summ_s, "messages_per_s": count / summ_s,
            "ratio": chars_in / chars_out, "median_ratio": statistics.median(ratios),
            "chars_in": chars_in, "chars_out": chars_out}
    return base, summ


def _embedding_time(embedder: Embedder, batch: list[str]) -> float:
    started = time.perf_counter()
    embedder.embed(batch)
    return time.perf_counter() - started


def bench_pipeline(sessions: dict[str, list[tuple[str, str, str, str]]],
                   embed: EmbedConfig) -> dict[str, float] | None:
    """Append, request, burst-work, and time until every summary is committed."""
    if shutil.which("redis-server") is None:
        return None
    from memq import MemoryClient
    from memq.store.dispatch.consolidation_jobs import wait_planned
    from memq.testing import RedisServer, WriterThread, run_queued_jobs
    from memq.workers.consolidate import request_event

    with tempfile.TemporaryDirectory(prefix="memq-bench-") as tmp:
        server = RedisServer(Path(tmp))
        server.start()
        config = Config(redis_url=server.url, db_path=f"{tmp}/memq.db", embed=embed)
        writer = WriterThread(config)
        writer.start()
        try:
            with MemoryClient(config=config) as client:
                _append_all(client, sessions)
                started = time.perf_counter()
                request = request_event()
                client.outbox.send(request)
                planned = wait_planned(client.redis, request.id, 10)
                # returns once the writer has committed every result
                run_queued_jobs(config, names.QUEUE_CONSOLIDATE, logging_level="WARNING")
                seconds = time.perf_counter() - started
                summaries = _count(config, "SELECT count(*) FROM messages WHERE role = 'system'")
                done = _count(config, "SELECT count(*) FROM messages "
                                      "WHERE consolidated_at IS NOT NULL")
        finally:
            writer.stop()
            server.stop()
    return {"seconds": seconds, "messages_per_s": done / seconds, "messages": done,
            "summaries": summaries, "chunks": planned["chunks"]}


def _append_all(client: Any, sessions: dict[str, list[tuple[str, str, str, str]]]) -> None:
    with client.batched():
        for sid, rows in sessions.items():
            for _, role, content, created_at in rows:
                client.append(sid, role, content, created_at=created_at)
    client.flush(60)


def _count(config: Config, sql: str) -> int:
    import apsw

    conn = apsw.Connection(config.db_path, flags=apsw.SQLITE_OPEN_READONLY)
    try:
        return int(conn.execute(sql).fetchall()[0][0])  # type: ignore[arg-type]  # a count
    finally:
        conn.close()


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--data", type=Path,
                        default=Path(os.environ.get("MEMQ_LOCOMO", DEFAULT_DATA)))
    parser.add_argument("--conversations", type=int, help="only the first N conversations")
    parser.add_argument("--no-pipeline", action="store_true")
    args = parser.parse_args()
    logging.basicConfig(level=logging.WARNING)  # one line per job would drown the figures
    if not args.data.exists():
        print(f"development conversations not found: {args.data}", file=sys.stderr)
        return 1
    embed = EmbedConfig(model_dir=os.environ.get("MEMQ_EMBED_MODEL_DIR",
                                                 EmbedConfig().model_dir))
    limits = ConsolidationConfig()
    sessions = load_sessions(args.data, args.conversations)
    chunks = make_chunks(sessions, limits)
    embedder = Embedder(embed)
    summariser = ExtractiveSummariser(embed, target_ratio=limits.target_ratio,
                                      embedder=embedder)
    summariser.summarise(as_messages(chunks[0]))  # load the model and warm up
    print(f"{len(sessions)} conversations, {sum(len(c.messages) for c in chunks)} messages "
          f"in {len(chunks)} chunks (chunk_size {limits.chunk_size}, chunk_chars "
          f"{limits.chunk_chars}); model threads {embed.threads}, BLAS threads "
          f"{os.environ['OMP_NUM_THREADS']}")
    base, summ = bench_in_process(embedder, summariser, chunks)
    report_in_process(base, summ)
    if not args.no_pipeline:
        report_pipeline(bench_pipeline(sessions, embed), base)
    return 0


def report_in_process(base: dict[str, float], summ: dict[str, Any]) -> None:
    print(f"baseline  raw embedding of the same {base['sentences']:.0f} sentences: "
          f"{base['messages_per_s']:8.1f} messages/s ({base['seconds']:.2f} s)")
    print(f"extractive summariser:        {summ['messages_per_s']:8.1f} messages/s "
          f"({summ['seconds']:.2f} s) = {summ['messages_per_s'] / base['messages_per_s']:.2f} "
          f"x the baseline")
    print(f"compression (chars in / chars out): {summ['ratio']:.2f} overall "
          f"({summ['chars_in']} -> {summ['chars_out']}), median per chunk "
          f"{summ['median_ratio']:.2f}")


def report_pipeline(pipe: dict[str, float] | None, base: dict[str, float]) -> None:
    if pipe is None:
        print("pipeline: skipped (redis-server not installed)")
        return
    print(f"whole pipeline (Redis, writer, one burst worker): "
          f"{pipe['messages_per_s']:8.1f} messages/s ({pipe['messages']:.0f} messages, "
          f"{pipe['summaries']:.0f} summaries, {pipe['seconds']:.2f} s) = "
          f"{pipe['messages_per_s'] / base['messages_per_s']:.2f} x the baseline")


if __name__ == "__main__":
    sys.exit(main())
