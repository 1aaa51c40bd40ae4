"""get_context latency for one session of 1,000 / 10,000 / 100,000 embedded messages.

Measured in one run, on the same database and queries:

- ``get_context``  the client as shipped: recency + importance + semantic, the query
                    vector already cached (its embedding is timed on its own line);
- ``brute``         the semantic search as a plain float32 scan of the cached matrix
                    (what the pruned index in store/vector_index.py must beat);
- ``naive``         get_context with the semantic branch done the naive way: load and
                    decode every embedding of the session from SQLite on each call.

The database is built through the writer's own path without Redis: ``message.appended``
and ``message.embedded`` events are encoded, decoded and applied as the writer's inbox
batches (``memq.testing.apply_events``), 1,000 at a time, into a fresh file (validation,
event log, projections, one transaction per batch). Embedding 100,000 texts with the
model would take most of an hour on two cores, so the vectors are mixtures of real ones:
a few hundred generated sentences are embedded with the real model, and each message's
vector is a random weighted mix of two of them plus a little noise, normalised. 2% of the
messages get importance >= 0.8.

numpy runs with one BLAS thread (set below, before numpy is imported), as an agent that
shares its cores with the embedding model should.

    PYTHONPATH=. MEMQ_EMBED_MODEL_DIR=models/all-MiniLM-L6-v2 python bench/context.py

``--realistic``: one user's long history of real conversations instead, at user scope with
the default profile, and its evidence recall (bench/context_realistic.py).
"""

from __future__ import annotations

import os
import sys

# Before numpy is imported, or the BLAS library has already started its threads.
os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")
os.environ.setdefault("OMP_NUM_THREADS", "1")

import argparse
import dataclasses
import itertools
import tempfile
import time
from contextlib import ExitStack
from datetime import UTC, datetime, timedelta
from pathlib import Path

import numpy as np
import redis

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.common import memory_kib, percentiles_ms, private_redis
from memq import MemoryClient
from memq.clock import to_rfc3339, uuid7
from memq.config import Config, EmbedConfig, RetrievalConfig
from memq.embedding import Embedder
from memq.events import Event, EventType
from memq.store import vectors
from memq.store.read.scope import Scope
from memq.store.write.writer import Writer
from memq.testing import apply_events

SESSION = "bench"
BATCH = 1000
SUBJECTS = ["my sister Ana", "the build server", "our cat Miso", "the quarterly report",
            "the production database", "my dentist", "the new intern", "the garden",
            "the flight to Tokyo", "the landlord", "the marathon training", "grandma"]
VERBS = ["needs", "broke", "mentioned", "is waiting for", "keeps asking about", "ruined",
         "depends on", "should get"]
OBJECTS = ["a new password", "the blue paint", "more sleep", "the invoice from March",
           "a vet appointment", "the train tickets", "a bigger budget", "fresh basil",
           "the spare keys", "the deployment script", "a birthday present", "new shoes"]
QUERIES = ["Where does my sister Ana live?", "What did the build server break?",
           "Is the cat afraid of anything?", "When is the quarterly report due?",
           "Who has the production database password?", "When is the dentist appointment?",
           "What is the new intern working on?", "What grows in the garden?",
           "When is the flight to Tokyo?", "What did the landlord say about the keys?",
           "How is the marathon training going?", "What present should grandma get?",
           "Remind me about the invoice from March", "Did anyone buy fresh basil?",
           "what about the deployment script", "new shoes for the marathon"]


def sentences(n: int) -> list[str]:
    combos = itertools.product(SUBJECTS, VERBS, OBJECTS)
    return [f"{s.capitalize()} {v} {o}." for s, v, o in itertools.islice(combos, n)]


def mixed_vectors(base: np.ndarray, n: int, rng: np.random.Generator) -> tuple[np.ndarray, ...]:
    a, b = rng.integers(0, len(base), n), rng.integers(0, len(base), n)
    weight = rng.uniform(0.5, 1.0, (n, 1)).astype(np.float32)
    mix = weight * base[a] + (1 - weight) * base[b]
    mix += 0.02 * rng.standard_normal(mix.shape, dtype=np.float32)
    return mix / np.linalg.norm(mix, axis=1, keepdims=True), a, b


def build_database(path: Path, n: int, base: np.ndarray, texts: list[str],
                   config: Config) -> float:
    """Apply n appended + n embedded events through the writer; returns seconds."""
    rng = np.random.default_rng(n)
    matrix, a, b = mixed_vectors(base, n, rng)
    important = rng.random(n) < 0.02
    start = datetime(2026, 1, 1, tzinfo=UTC)
    # A client that never connects: the events are applied directly, not read from Redis.
    writer = Writer.open(config.replace(db_path=str(path)), redis.Redis())
    began = time.perf_counter()
    try:
        for lo in range(0, n, BATCH):
            events: list[Event | bytes] = []
            for i in range(lo, min(n, lo + BATCH)):
                mid = uuid7()
                when = to_rfc3339(start + timedelta(seconds=i))
                content = f"{texts[a[i]]} Also, {texts[b[i]][0].lower()}{texts[b[i]][1:]}"
                events.append(Event(uuid7(), EventType.MESSAGE_APPENDED, SESSION, when, {
                    "message_id": mid, "role": "user", "content": content,
                    "importance": 0.9 if important[i] else 0.5}))
                events.append(Event(uuid7(), EventType.MESSAGE_EMBEDDED, None, when, {
                    "message_id": mid, "model": config.embed.model_name,
                    "dim": config.embed.dim, "vector_b64": vectors.to_b64(matrix[i])}))
            result = apply_events(writer, events)
            assert result.rejected == 0, "bench events were rejected"
    finally:
        writer.close()
    return time.perf_counter() - began


def timed(calls: int, fn: object) -> list[float]:
    out = []
    for i in range(calls):
        began = time.perf_counter()
        fn(i)  # type: ignore[operator]
        out.append(time.perf_counter() - began)
    return out


def naive_context(client: MemoryClient, qvec: np.ndarray) -> list[str]:
    """get_context's branches, the semantic one by decoding every blob on each call."""
    retrieval, sources = client.config.retrieval, client.sources
    found = {m.id for m in sources.recent(SESSION, retrieval.recency_limit)}
    found |= {m.id for m in sources.important(Scope(SESSION), retrieval.importance_threshold,
                                              retrieval.importance_limit)}
    with client.readers.connection() as conn:
        rows: list[tuple[str, bytes]] = conn.execute(  # type: ignore[assignment]  # by the SQL
            """SELECT id, embedding FROM messages WHERE session_id = ?
               AND embedding IS NOT NULL AND embedding_model = ? AND embedding_dim = ?""",
            (SESSION, client.config.embed.model_name, client.config.embed.dim)).fetchall()
    ids = [r[0] for r in rows]
    matrix = np.vstack([vectors.decode(r[1]) for r in rows])
    scores = matrix @ qvec
    best = [i for i in np.argsort(-scores)[: retrieval.semantic_limit]
            if scores[i] > retrieval.semantic_threshold]
    found |= {m.id for m in sources.messages([ids[i] for i in best])}
    return sorted(found)


def brute_search(matrix: np.ndarray, ids: list[str], qvec: np.ndarray, threshold: float,
                 limit: int) -> list[str]:
    scores = matrix @ qvec
    top = np.argpartition(-scores, min(limit, len(scores) - 1))[:limit]
    top = top[np.argsort(-scores[top])]
    return [ids[i] for i in top if scores[i] > threshold]


def run_size(n: int, base: np.ndarray, texts: list[str], qvecs: list[np.ndarray],
             config: Config, calls: int, naive_calls: int, workdir: Path) -> None:
    path = workdir / f"context-{n}.db"
    build_s = build_database(path, n, base, texts, config)
    rss_before = memory_kib("RssAnon")
    with MemoryClient(config=config.replace(db_path=str(path))) as client:
        client.query_vectors.embedder = shared_embedder(config)
        for query, vec in zip(QUERIES, qvecs, strict=True):  # query embedding timed apart
            client.query_vectors._cache[query] = vec
        began = time.perf_counter()
        client.get_context(SESSION, query=QUERIES[0])  # cold: loads the vector cache
        cold_ms = (time.perf_counter() - began) * 1000
        ctx = timed(calls, lambda i: client.get_context(SESSION, query=QUERIES[i % len(QUERIES)]))
        serving_mib = (memory_kib("RssAnon") - rss_before) / 1024  # before the baselines' copies
        index = client.vector_cache._entries[Scope(SESSION).key].index
        candidates = []
        for vec in qvecs:
            index.search(vec, config.retrieval.semantic_threshold, config.retrieval.semantic_limit)
            candidates.append(index.last_candidates)
        matrix, ids = plain_matrix(index, config.embed.dim)
        threshold, limit = config.retrieval.semantic_threshold, config.retrieval.semantic_limit
        same = all(
            [i for i, _ in index.search(v, threshold, limit)]
            == brute_search(matrix, ids, v, threshold, limit) for v in qvecs)
        brute = timed(calls, lambda i: brute_search(matrix, ids, qvecs[i % len(qvecs)],
                                                    threshold, limit))
        naive = timed(naive_calls, lambda i: naive_context(client, qvecs[i % len(qvecs)]))
        cache_mib = client.vector_cache.nbytes / 2**20
    report(n, build_s, cold_ms, ctx, brute, naive, candidates, same, cache_mib, serving_mib)
    report_feedback(feedback_cost(config.replace(db_path=str(path)), qvecs, calls))


def feedback_cost(config: Config, qvecs: list[np.ndarray], calls: int
                  ) -> dict[str, list[float]]:
    """The default profile (recall) with its feedback round and without, call by call."""
    clients = {}
    with ExitStack() as stack:
        for name, weight in (("with", RetrievalConfig().recall_feedback), ("without", 0.0)):
            retrieval = dataclasses.replace(RetrievalConfig(), recall_feedback=weight)
            client = stack.enter_context(MemoryClient(config=config.replace(retrieval=retrieval)))
            client.query_vectors.embedder = shared_embedder(config)
            for query, vec in zip(QUERIES, qvecs, strict=True):
                client.query_vectors._cache[query] = vec
            client.get_context(SESSION, query=QUERIES[0])
            clients[name] = client
        times: dict[str, list[float]] = {name: [] for name in clients}
        for i in range(calls):
            for name, client in clients.items():
                began = time.perf_counter()
                client.get_context(SESSION, query=QUERIES[i % len(QUERIES)])
                times[name].append(time.perf_counter() - began)
    return times


def report_feedback(times: dict[str, list[float]]) -> None:
    (w50, w95), (o50, o95) = percentiles_ms(times["with"]), percentiles_ms(times["without"])
    print(f"  recall profile   p50 {w50:7.2f} ms  p95 {w95:7.2f} ms   without its feedback "
          f"round: p50 {o50:.2f} ms, p95 {o95:.2f} ms (x{w50 / o50:.2f} / x{w95 / o95:.2f})")


def plain_matrix(index: object, dim: int) -> tuple[np.ndarray, list[str]]:
    """The cached vectors back in the original basis, as one float32 matrix."""
    n = len(index)  # type: ignore[arg-type]
    rotated = index._rows(np.arange(n))  # type: ignore[attr-defined]
    rotation = index._rotation  # type: ignore[attr-defined]
    matrix = rotated if rotation is None else rotated @ rotation.T
    return np.ascontiguousarray(matrix, dtype=np.float32), list(index._ids)  # type: ignore[attr-defined]


def report(n: int, build_s: float, cold_ms: float, ctx: list[float], brute: list[float],
           naive: list[float], candidates: list[int], same: bool, cache_mib: float,
           rss_mib: float) -> None:
    c50, c95 = percentiles_ms(ctx)
    b50, b95 = percentiles_ms(brute)
    n50, n95 = percentiles_ms(naive)
    print(f"\n{n:,} embedded messages (built in {build_s:.1f} s through the writer's batches)")
    print(f"  get_context      p50 {c50:7.2f} ms  p95 {c95:7.2f} ms   (first call, loading "
          f"the cache: {cold_ms:.0f} ms)")
    print(f"  brute scan only  p50 {b50:7.2f} ms  p95 {b95:7.2f} ms")
    print(f"  naive            p50 {n50:7.2f} ms  p95 {n95:7.2f} ms")
    print(f"  naive / get_context: p50 x{n50 / c50:.1f}, p95 x{n95 / c95:.1f};"
          f"  brute scan / get_context p95: x{b95 / c95:.2f}")
    print(f"  rows whose last block was read per query: median {int(np.median(candidates)):,} "
          f"of {n:,}; same ids as the brute scan: {'yes' if same else 'NO'}")
    print(f"  vector cache {cache_mib:.0f} MiB; private memory grew {rss_mib:.0f} MiB by loading "
          f"and serving this session; RSS now {memory_kib('VmRSS') / 1024:.0f} MiB, peak "
          f"{memory_kib('VmHWM') / 1024:.0f} MiB (the peak includes building the database "
          f"and the baselines)")


_embedder: Embedder | None = None


def shared_embedder(config: Config) -> Embedder:
    global _embedder
    if _embedder is None:
        _embedder = Embedder(config.embed)
        _embedder.load()
    return _embedder


def main() -> None:
    if "--realistic" in sys.argv[1:]:
        from bench import context_realistic

        context_realistic.main(sys.argv[1:])
        return
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--sizes", default="1000,10000,100000")
    parser.add_argument("--calls", type=int, default=200, help="timed get_context calls")
    parser.add_argument("--naive-calls", type=int, default=20)
    parser.add_argument("--base", type=int, default=384, help="sentences embedded for real")
    args = parser.parse_args()
    model_dir = os.environ.get("MEMQ_EMBED_MODEL_DIR", "models/all-MiniLM-L6-v2")
    # The naive baseline repeats the tri-hybrid profile's branches, so that is what is timed
    # (bench/retrieval.py times the default recall profile against its own baselines).
    config = Config(embed=EmbedConfig(model_dir=model_dir),
                    retrieval=RetrievalConfig(profile="tri-hybrid"))
    embedder = shared_embedder(config)
    texts = sentences(args.base)
    began = time.perf_counter()
    base = embedder.embed(texts)
    print(f"embedded {len(texts)} base sentences in {time.perf_counter() - began:.1f} s; "
          f"OPENBLAS_NUM_THREADS={os.environ['OPENBLAS_NUM_THREADS']}, "
          f"model threads={config.embed.threads}")
    query_times = timed(len(QUERIES) * 3, lambda i: embedder.embed([QUERIES[i % len(QUERIES)]]))
    q50, q95 = percentiles_ms(query_times)
    print(f"query embedding (uncached, one query): p50 {q50:.2f} ms  p95 {q95:.2f} ms")
    qvecs = list(embedder.embed(QUERIES))
    # The client checks the database against its Redis keyspace: a private Redis, so that
    # whatever another memq left in a shared one cannot fail the run.
    with tempfile.TemporaryDirectory(prefix="memq-bench-") as tmp, private_redis() as url:
        for n in (int(s) for s in args.sizes.split(",")):
            run_size(n, base, texts, qvecs, config.replace(redis_url=url), args.calls,
                     args.naive_calls, Path(tmp))


if __name__ == "__main__":
    main()
