"""get_context at user scope over one user's long history of real conversations.

``bench/context.py --realistic``. The history is the LoCoMo development conversations
plus copies of them with renamed speakers and earlier dates (:mod:`bench.replicas`), to
1,000 / 10,000 / 100,000 (/ 1,000,000) turns, every copy a look-alike distractor; each
LoCoMo session is a memq session of the one user. Every turn has its real vector
(:mod:`bench.text_vectors` embeds each text once and keeps it in ``--cache``); beyond
``--embed-up-to`` turns a copy takes the vectors of the same turns of an earlier copy
(its names differ; said in the output). The database is built through the writer's own
batches (``memq.testing.apply_events``), without Redis.

The LoCoMo questions (categories 1-4) are asked from each original conversation's last
session at user scope with the default profile, query vectors already cached (embedding a
query is timed by ``bench/context.py``). Printed per size: get_context p50 / p95, the
evidence recall of what it returned (the originals' evidence turns among at most 30 items;
"-" where the history is cut inside the originals), and in the same run the baselines
timed on the same scope: BM25 top-20 (the lexical index alone) and an exact cosine top-20
over the scope's vectors as one float32 matrix, and the lexical search as get_context reads
it (its best 1,000); then the reader's memory: the vector cache's bytes per 100,000
vectors, how much the process grew, and how much a fresh process grows loading the scope
and answering 20 questions (this one's heap holds what the build freed); and, once a
scope's contextual keys are projected, what their search finds of the exact best 50 and
how long finding its candidates takes, as it does (the leaders of the index's first
block) and by an exact search.

    .venv/bin/python bench/context.py --realistic --sizes 1000,10000,100000
"""

from __future__ import annotations

import argparse
import dataclasses
import multiprocessing
import time
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import redis

from bench import locomo, replicas
from bench.common import memory_kib, percentiles_ms, private_redis, scratch_dir
from bench.retrieval import setting
from bench.text_vectors import TextVectors
from memq import MemoryClient
from memq.clock import to_rfc3339, uuid7
from memq.config import Config, EmbedConfig, RetrievalConfig
from memq.embedding import Embedder
from memq.errors import ConfigError
from memq.events import Event, EventType
from memq.producers.ranking.profiles import LEXICAL_EVIDENCE
from memq.store import vectors
from memq.store.read import neighbourhoods
from memq.store.read.neighbourhoods import Neighbourhoods
from memq.store.read.scope import Scope
from memq.store.write.writer import Writer
from memq.testing import apply_events

USER = "haystack-user"
BATCH = 2000


def turn_vectors(history: list[locomo.Conversation], store: TextVectors, embed_up_to: int
                 ) -> tuple[np.ndarray, int]:
    """A vector per turn of ``history`` (oldest first): its own for the newest
    ``embed_up_to`` turns, beyond that the same turn's in the nearest embedded copy."""
    texts = [t.content for c in history for t in c.turns]
    own = min(len(texts), embed_up_to)
    matrix = np.empty((len(texts), store.embedder.dim), dtype=np.float32)
    matrix[len(texts) - own:] = store.vectors(texts[len(texts) - own:])
    if own == len(texts):
        return matrix, 0
    donor: dict[tuple[str, str], int] = {}
    row = len(texts)
    for conversation in reversed(history):
        row -= len(conversation.turns)
        base = conversation.session_id.split("~")[0]
        for i, t in enumerate(conversation.turns):
            key = (base, t.dia_id)
            if row + i >= len(texts) - own:
                donor.setdefault(key, row + i)
            else:
                matrix[row + i] = matrix[donor[key]]
    return matrix, len(texts) - own


def build(path: Path, history: list[locomo.Conversation], matrix: np.ndarray,
          config: Config) -> tuple[dict[str, str], float]:
    """Apply an append and an embedding event per turn; the originals' message ids."""
    writer = Writer.open(config.replace(db_path=str(path)), redis.Redis())
    ids: dict[str, str] = {}
    began, events, row = time.perf_counter(), [], 0
    try:
        for conversation in history:
            for t in conversation.turns:
                mid = uuid7()
                if "~" not in conversation.session_id:
                    ids[f"{conversation.session_id}/{t.dia_id}"] = mid
                events.extend(_turn_events(conversation, t, mid, matrix[row], config))
                row += 1
                if len(events) >= BATCH:
                    _apply(writer, events)
        _apply(writer, events)
    finally:
        writer.close()
    return ids, time.perf_counter() - began


def _turn_events(conversation: locomo.Conversation, t: locomo.Turn, mid: str,
                 vector: np.ndarray, config: Config) -> list[Event]:
    when = to_rfc3339(t.created_at)
    session = conversation.memq_session(t, "user")
    return [
        Event(uuid7(), EventType.MESSAGE_APPENDED, session, when, {
            "message_id": mid, "role": t.role, "content": t.content, "importance": 0.5,
            "user_id": USER}),
        Event(uuid7(), EventType.MESSAGE_EMBEDDED, None, when, {
            "message_id": mid, "model": config.embed.model_name, "dim": config.embed.dim,
            "vector_b64": vectors.to_b64(vector)}),
    ]


def _apply(writer: Writer, events: list[Event]) -> None:
    if events:
        result = apply_events(writer, list(events))
        assert result.rejected == 0, "bench events were rejected"
        events.clear()


@dataclass
class Asked:
    conversation: locomo.Conversation
    question: locomo.Question
    vector: np.ndarray


def questions(originals: Sequence[locomo.Conversation], store: TextVectors, calls: int
              ) -> list[Asked]:
    asked = [(c, q) for c in originals for q in c.questions]
    step = max(1, len(asked) // calls)
    asked = asked[::step][:calls]
    vecs = store.vectors([q.text for _, q in asked])
    return [Asked(c, q, v) for (c, q), v in zip(asked, vecs, strict=True)]


@contextmanager
def reader(config: Config, asked: list[Asked]) -> Iterator[MemoryClient]:
    with MemoryClient(config=config) as client:
        for a in asked:
            client.query_vectors._cache[a.question.text] = a.vector
        yield client


@dataclass
class Found:
    latency: list[float]
    recall: float | None
    """None where the history is cut inside the originals (their evidence is missing)."""
    by_conversation: dict[str, float]
    """The same per original conversation (empty where ``recall`` is None): a setting
    chosen on some conversations is judged on the others."""


def measure(client: MemoryClient, asked: list[Asked], ids: dict[str, str], whole: bool
            ) -> Found:
    latency, recall = [], []
    by_conversation: dict[str, list[float]] = {}
    for a in asked:
        session = a.conversation.memq_session(None, "user")
        began = time.perf_counter()
        items = client.get_context(session, a.question.text, scope="user")
        latency.append(time.perf_counter() - began)
        got = {item.id for item in items}
        wanted = [ids.get(f"{a.conversation.session_id}/{e}") for e in a.question.evidence]
        recall.append(sum(1 for w in wanted if w in got) / len(wanted))
        by_conversation.setdefault(a.conversation.session_id, []).append(recall[-1])
    if not whole:
        return Found(latency, None, {})
    return Found(latency, float(np.mean(recall)),
                 {name: float(np.mean(r)) for name, r in by_conversation.items()})


def baselines(client: MemoryClient, asked: list[Asked]) -> dict[str, list[float]]:
    """BM25 top-20 and an exact float32 cosine top-20 on the same scope, call by call; and
    the lexical search as get_context reads it (its best LEXICAL_EVIDENCE)."""
    scope = Scope(asked[0].conversation.memq_session(None, "user"), "user", USER)
    entry = client.vector_cache._entries[scope.key].index
    matrix = entry.vectors(list(entry._ids))
    evidence = f"BM25 best {LEXICAL_EVIDENCE:,}"
    times: dict[str, list[float]] = {"BM25 top-20": [], "cosine top-20": [], evidence: []}
    for a in asked:
        for limit, name in ((20, "BM25 top-20"), (LEXICAL_EVIDENCE, evidence)):
            began = time.perf_counter()
            client.sources.lexical_scores(scope, a.question.text, limit)
            times[name].append(time.perf_counter() - began)
        began = time.perf_counter()
        scores = matrix @ a.vector
        np.argpartition(-scores, min(20, len(scores) - 1))[:20]
        times["cosine top-20"].append(time.perf_counter() - began)
    return times


def run_size(n: int, originals: list[locomo.Conversation], store: TextVectors,
             asked: list[Asked], config: Config, embed_up_to: int, workdir: Path) -> None:
    history = replicas.history(originals, n)
    matrix, reused = turn_vectors(history, store, embed_up_to)
    path = workdir / f"realistic-{n}.db"
    ids, build_s = build(path, history, matrix, config)
    whole = all(f"{c.session_id}/{t.dia_id}" in ids for c in originals for t in c.turns)
    rss = memory_kib("RssAnon")
    with reader(config.replace(db_path=str(path)), asked) as client:
        began = time.perf_counter()
        client.get_context(asked[0].conversation.memq_session(None, "user"),
                           asked[0].question.text, scope="user")
        cold = time.perf_counter() - began
        found = measure(client, asked, ids, whole)
        grown = (memory_kib("RssAnon") - rss) / 1024
        base = baselines(client, asked)
        cache_bytes = client.vector_cache.nbytes
        keys = projection(client, asked)
    report(n, replicas.count(history), build_s, reused, cold, found, base, cache_bytes, grown)
    few = asked[:FRESH_CALLS]
    print(f"  a fresh reader process grew {fresh_reader_mib(config, path, few):.0f} MiB "
          f"loading the scope and answering {len(few)} questions")
    print(f"  contextual keys: {keys}")


FRESH_CALLS = 20


def fresh_reader_mib(config: Config, path: Path, asked: list[Asked]) -> float:
    """How much a new process grows serving the scope, as an agent or ``memq serve`` would:
    this one's heap holds what building the database freed, which the load reuses."""
    spawn = multiprocessing.get_context("spawn")
    with spawn.Pool(1) as pool:
        return float(pool.apply(_reader_growth, (config.replace(db_path=str(path)), asked)))


def _reader_growth(config: Config, asked: list[Asked]) -> float:
    with reader(config, asked) as client:
        # A first read opens the pool: what any client holds before it loads a scope.
        client.history(asked[0].conversation.memq_session(None, "user"), limit=1)
        before = memory_kib("RssAnon")
        for a in asked:
            client.get_context(a.conversation.memq_session(None, "user"), a.question.text,
                               scope="user")
        return (memory_kib("RssAnon") - before) / 1024


def projection(client: MemoryClient, asked: list[Asked], best: int = 50) -> str:
    """What projecting the scope's contextual keys (store/read/neighbourhoods.py) loses:
    of each question's exact best ``best`` keys, computed for every turn from the turns'
    own vectors, the share a projected search returns."""
    scope = Scope(asked[0].conversation.memq_session(None, "user"), "user", USER)
    keys = client.vector_cache._entries[scope.key].keys
    if keys is None or not keys.projected:
        return "whole (a search over them is exact)"
    ids = list(keys.index._ids)
    queries = np.stack([keys.turns.turned(a.vector) for a in asked])
    top = np.full((len(asked), 0), -np.inf, dtype=np.float32)
    rows = np.zeros((len(asked), 0), dtype=np.int64)
    for at in range(0, len(ids), 8192):  # chunked: every key at once would not fit at 1M
        scores = queries @ keys._keys(ids[at:at + 8192], keys.turns.stored).T
        top = np.concatenate([top, scores], axis=1)
        rows = np.concatenate([rows, np.broadcast_to(np.arange(at, at + scores.shape[1]),
                                                     scores.shape)], axis=1)
        keep = np.argsort(-top, axis=1)[:, :best]
        top, rows = np.take_along_axis(top, keep, 1), np.take_along_axis(rows, keep, 1)
    found = [len({ids[r] for r in exact} & {i for i, _ in keys.search(a.vector, -np.inf, best)})
             / best for a, exact in zip(asked, rows, strict=True)]
    leaders, whole = candidate_times(keys, asked, best)
    return (f"projected; a search returns {np.mean(found):.4f} of the exact best {best} "
            f"(lowest {min(found):.2f}); its candidates by the first block's leaders "
            f"p50 {leaders:.2f} ms, by an exact search of the projection p50 {whole:.2f} ms")


def candidate_times(keys: Neighbourhoods, asked: list[Asked], best: int) -> tuple[float, float]:
    """The keys' candidates for ``best`` results, as a search finds them (the leaders of
    the index's first block) and by the exact search of the projection, alternated."""
    wanted, axes = neighbourhoods.CANDIDATES_PER_RESULT * best, keys._axes
    assert axes is not None, "the keys are projected"
    times: tuple[list[float], list[float]] = ([], [])
    for a in asked:
        projected = np.asarray(a.vector, dtype=np.float32) @ axes
        for kept, find in zip(times, (
                lambda q: keys.index.leaders(q, wanted, neighbourhoods.LEADERS),
                lambda q: keys.index.search(q, -np.inf, wanted)), strict=True):
            began = time.perf_counter()
            find(projected)
            kept.append(time.perf_counter() - began)
    return float(np.median(times[0]) * 1000), float(np.median(times[1]) * 1000)


def report(n: int, turns: int, build_s: float, reused: int, cold: float,
           found: Found, base: dict[str, list[float]], cache_bytes: int,
           grown_mib: float) -> None:
    p50, p95 = percentiles_ms(found.latency)
    recall = found.recall
    print(f"\n{turns:,} turns in one user (asked for {n:,}; built in {build_s:.0f} s"
          + (f"; {reused:,} turns carry an earlier copy's vector" if reused else "") + ")")
    print(f"  get_context, user scope   p50 {p50:7.2f} ms  p95 {p95:7.2f} ms   evidence "
          f"recall {'-' if recall is None else f'{recall:.3f}'}   (first call {cold:.2f} s)")
    if found.by_conversation:
        print("  evidence recall by conversation: " + ", ".join(
            f"{name} {r:.3f}" for name, r in found.by_conversation.items()))
    for name, samples in base.items():
        b50, b95 = percentiles_ms(samples)
        print(f"  {name:<25} p50 {b50:7.2f} ms  p95 {b95:7.2f} ms   get_context / it: "
              f"p50 x{p50 / b50:.1f}, p95 x{p95 / b95:.1f}")
    per_100k = cache_bytes / 2**20 * 100_000 / max(turns, 1)
    print(f"  vector cache {cache_bytes / 2**20:.0f} MiB ({per_100k:.0f} MiB per 100,000 "
          f"vectors); the process's private memory grew {grown_mib:.0f} MiB loading and "
          "serving the scope")


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--realistic", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--sizes", default="1000,10000,100000")
    parser.add_argument("--calls", type=int, default=200, help="questions asked per size")
    parser.add_argument("--data", type=Path, default=Path("../shared/data/locomo-dev.json"))
    parser.add_argument("--cache", type=Path, default=Path(".bench-cache"))
    parser.add_argument("--embed-up-to", type=int, default=110_000,
                        help="turns with their own vector; older copies reuse one")
    parser.add_argument("--model-dir", default="models/all-MiniLM-L6-v2")
    parser.add_argument("--set", action="append", type=setting, default=[], dest="settings",
                        metavar="KEY=VALUE", help="a [retrieval] setting for get_context, "
                        "e.g. recall_name_penalty=0 (repeatable)")
    args = parser.parse_args(argv)
    originals, _ = locomo.read(args.data, [1, 2, 3, 4])
    changes: dict[str, Any] = dict(args.settings)
    try:
        retrieval = dataclasses.replace(RetrievalConfig(), **changes)
    except ConfigError as exc:
        raise SystemExit(f"error: {exc}") from None
    config = Config(embed=EmbedConfig(model_dir=args.model_dir), retrieval=retrieval)
    store = TextVectors(args.cache, Embedder(EmbedConfig(model_dir=args.model_dir, threads=2)))
    asked = questions(originals, store, args.calls)
    print(f"{len(asked)} questions of {locomo.category_counts(originals).total()} "
          f"(categories 1-4), asked at user scope from each conversation's last session; "
          f"profile {config.retrieval.profile}"
          + "".join(f", {key} = {value:g}" for key, value in args.settings)
          + "; one BLAS thread")
    with private_redis() as url, scratch_dir() as workdir:
        for n in (int(s) for s in args.sizes.split(",")):
            run_size(n, originals, store, asked, config.replace(redis_url=url),
                     args.embed_up_to, workdir)
