"""Evidence recall and latency of get_context's profiles on a LoCoMo-format file.

    PYTHONPATH=. MEMQ_EMBED_MODEL_DIR=models/all-MiniLM-L6-v2 \\
        python bench/retrieval.py --data ../shared/data/locomo-dev.json [--ablations]

1. A private redis-server and a fresh database; the real writer runs in this process.
2. Every turn of every conversation is appended through the real client (rules in
   bench/locomo.py); the writer enqueues the embed jobs, and the real embed worker runs
   here in burst mode (one worker, the model's ``[embed] threads``) until every message
   is committed with its vector.
3. Every question of the chosen categories (default 1-4) is asked with ``get_context``
   against its conversation's session, once per profile, the profiles interleaved
   question by question so machine load weighs on all alike. Evidence recall of a
   question = the share of its evidence turns among the items returned (recency and
   everything else included); the figures are means over questions.
4. Latency is wall time of the whole ``get_context`` call, the query's embedding
   included (each profile's client remembers one query only, so every question is
   embedded in its call); each session is warmed up once first (model loaded, vectors
   cached). numpy runs one BLAS thread, the model ``[embed] threads`` (1).

Baselines in the same run: cosine top-10 and BM25 top-10 (the issue's reference
figures), and the same two at the recall profile's budget of 20.
"""

from __future__ import annotations

import os

# Before numpy is imported, or the BLAS library has already started its threads.
os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")
os.environ.setdefault("OMP_NUM_THREADS", "1")

import argparse
import dataclasses
import hashlib
import itertools
import shutil
import sys
import threading
import time
from collections.abc import Iterator
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import orjson
import redis

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench import folds, locomo, replicas
from bench.common import percentile, private_redis, scratch_dir
from bench.folds import Answer, Scores
from memq import MemoryClient, broker, names
from memq.config import Config, RetrievalConfig
from memq.config import load as load_config
from memq.embedding import Embedder
from memq.errors import MemqError
from memq.producers.ranking.fusion import Candidate
from memq.producers.ranking.profiles import (
    Lexical,
    Profile,
    Recency,
    Relevance,
    Semantic,
    Sources,
    budgeted,
    profile_for,
)
from memq.store.migrations import MIGRATIONS
from memq.store.read.scope import Scope
from memq.store.write.service import open_writer
from memq.workers import context
from memq.workers import embed as embed_job
from memq.workers.queues import worker

BASELINES: dict[str, Profile] = {
    "cosine top-10": Profile("cosine top-10", (Semantic(-1.0, 10),)),
    "BM25 top-10": Profile("BM25 top-10", (Lexical(10),)),
    "cosine top-20": Profile("cosine top-20", (Semantic(-1.0, 20),)),
    "BM25 top-20": Profile("BM25 top-20", (Lexical(20),)),
    # What the default returns, with plain relevance: the same recent window, then one
    # branch's best up to the same 30 items (the fair comparison for `recall`).
    "recent 10 + cosine, 30": Profile("recent 10 + cosine, 30",
                                      (Recency(10), Semantic(-1.0, 30)), budgeted(30)),
    "recent 10 + BM25, 30": Profile("recent 10 + BM25, 30", (Recency(10), Lexical(30)),
                                    budgeted(30)),
}
"""Plain retrieval, for the ratios."""

ABLATIONS: dict[str, dict[str, Any]] = {
    "recall, no neighbours": {"recall_neighbour_share": 0.0},
    "recall, lexical only": {"recall_lexical_weight": 1.0},
    "recall, semantic only": {"recall_lexical_weight": 0.0},
    "recall, recency 10": {"recall_recency_limit": 10},
    "recall, recency 0": {"recall_recency_limit": 0},
    "recall, min_z 0": {"recall_min_z": 0.0},
    "recall, min_z 1.5": {"recall_min_z": 1.5},
    "recall, neighbour share 0.5": {"recall_neighbour_share": 0.5},
    "recall, neighbour share 0.9": {"recall_neighbour_share": 0.9},
}
"""Variants of the recall profile (``--ablations``): what each of its rules is worth."""


@dataclass(frozen=True)
class ReciprocalRank(Relevance):
    """Ablation: the usual reciprocal-rank fusion, 1/(60 + rank) per branch, equal weights,
    in place of the shares of each branch's best score (neighbours and budget unchanged)."""

    k: int = 60

    def _fused(self, sources: Sources, scope: Scope, query: str) -> list[Candidate]:
        found = super()._fused(sources, scope, query)
        lexical = sorted((c for c in found if c.lexical is not None),
                         key=lambda c: -(c.lexical or 0.0))
        semantic = sorted((c for c in found if c.z is not None), key=lambda c: -(c.z or 0.0))
        rrf = {c.id: 0.0 for c in found}
        for ranking in (lexical, semantic):
            for rank, c in enumerate(ranking, 1):
                rrf[c.id] += 1 / (self.k + rank)
        best = max(rrf.values(), default=0.0) or 1.0
        scored = [dataclasses.replace(c, own=rrf[c.id] / best) for c in found]
        return sorted(scored, key=lambda c: (c.own, c.id), reverse=True)


def reciprocal_rank(config: RetrievalConfig) -> Profile:
    recall = profile_for(dataclasses.replace(config, profile="recall"))
    relevance = recall.strategies[-1]
    assert isinstance(relevance, Relevance)
    fields = {f.name: getattr(relevance, f.name) for f in dataclasses.fields(Relevance)}
    return Profile("recall, RRF", (*recall.strategies[:-1], ReciprocalRank(**fields)),
                   recall.combine)


@contextmanager
def running_writer(config: Config) -> Iterator[None]:
    writer = open_writer(config, redis.Redis.from_url(config.redis_url))
    stop = threading.Event()
    thread = threading.Thread(target=writer.run, args=(stop,), daemon=True)
    thread.start()
    try:
        yield
    finally:
        stop.set()
        thread.join(30)
        writer.close()


def embed_through_workers(config: Config, loader: MemoryClient, timeout: float = 1800) -> None:
    """Run the embed worker here, in burst mode, until every message has a vector.

    The writer enqueued the jobs after each commit; the worker sends ``message.embedded``
    events back through the inbox and the writer commits them. A burst may end before
    the last jobs are enqueued or their results committed: repeat until none is missing.
    """
    connection = broker.client_for(config, client_name="bench-embed")
    context.install(context.WorkerContext(config, connection))
    deadline = time.monotonic() + timeout
    for attempt in itertools.count():
        if missing_embeddings(loader) == 0:
            return
        if time.monotonic() > deadline:
            raise SystemExit(f"error: {missing_embeddings(loader)} messages still without "
                             f"a vector after {timeout:.0f} s")
        worker([names.QUEUE_EMBED], connection, name=f"bench-embed-{attempt}").work(
            burst=True, with_scheduler=False, logging_level="WARNING")
        time.sleep(0.05)


def count(client: MemoryClient, where: str) -> int:
    with client.readers.connection() as conn:
        row = conn.execute(f"SELECT count(*) FROM messages WHERE {where}").fetchone()
    return int(row[0]) if row else 0


def missing_embeddings(client: MemoryClient) -> int:
    """Messages with content that have neither a vector nor an error yet."""
    return count(client, "embedding IS NULL AND embedding_error IS NULL AND trim(content) != ''")


def failed_embeddings(client: MemoryClient) -> int:
    return count(client, "embedding_error IS NOT NULL")


@dataclass(frozen=True)
class Run:
    """What to measure: profiles, and whether baselines, ablations and the fold grid."""

    profiles: tuple[str, ...] = ("tri-hybrid", "recall")
    baselines: bool = True
    ablations: bool = False
    folds: bool = False
    tuned: str = "recall"
    """The profile whose constants the folds tune (over :data:`folds.GRID_AXES`)."""
    settings: tuple[tuple[str, float], ...] = ()
    """``[retrieval]`` settings changed for every profile and variant measured."""

    def variants(self, settings: RetrievalConfig) -> dict[str, tuple[RetrievalConfig,
                                                                    Profile | None]]:
        """Name -> (settings, a profile object when it is not one of ``PROFILES``)."""
        common: dict[str, Any] = dict(self.settings)
        settings = dataclasses.replace(settings, **common)
        found: dict[str, tuple[RetrievalConfig, Profile | None]] = {
            name: (settings, profile) for name, profile in BASELINES.items() if self.baselines}
        for name in self.profiles:
            found[name] = (dataclasses.replace(settings, profile=name), None)
        if self.ablations:
            for name, changes in ABLATIONS.items():
                found[name] = (dataclasses.replace(settings, profile="recall", **changes), None)
            found["recall, RRF instead of shares"] = (settings, reciprocal_rank(settings))
        if self.folds:
            for name, changes in folds.grid().items():
                tuned = dataclasses.replace(settings, profile=self.tuned, **changes)
                found[f"{self.tuned} {name}"] = (tuned, None)
        return found


def clients_for(config: Config, run: Run, *, embedder: Embedder,
                stack: ExitStack) -> dict[str, MemoryClient]:
    """One client per profile, each remembering one query, all sharing one model."""
    settings = dataclasses.replace(config.retrieval, query_cache_size=1)
    clients = {}
    for name, (retrieval, profile) in run.variants(settings).items():
        client = stack.enter_context(MemoryClient(config=config.replace(retrieval=retrieval)))
        client.query_vectors.embedder = embedder
        if profile is not None:
            client.profile = profile
        clients[name] = client
    return clients


def measure(clients: dict[str, MemoryClient], conversations: list[locomo.Conversation],
            ids: dict[str, str], layout: str) -> dict[str, Scores]:
    """Ask every question of every client, the clients interleaved question by question."""
    scores = {name: Scores() for name in clients}
    for conversation in conversations:
        asking = conversation.memq_session(None, layout)
        for client in clients.values():  # warm up: model, vector cache, working memory
            client.get_context(asking, "warm up", scope=locomo.scope_of(layout))
        for question in conversation.questions:
            wanted = {ids[f"{conversation.session_id}/{e}"] for e in question.evidence}
            for name, client in clients.items():
                began = time.perf_counter()
                items = client.get_context(asking, question.text,
                                           scope=locomo.scope_of(layout))
                seconds = time.perf_counter() - began
                found = len(wanted & {item.id for item in items})
                scores[name].add(Answer(conversation.session_id, question.category,
                                        found / len(wanted), seconds, len(items)))
    return scores


def row(name: str, s: Scores, categories: list[int], base: float) -> str:
    ms = [v * 1000 for v in s.latency]
    return (f"{name:<34}" + "".join(f"{s.mean(c):>15.3f}" for c in categories)
            + f"{s.mean():>8.3f}{s.mean() / base:>10.2f}{sum(s.items) / len(s.items):>7.1f}"
            + f"{percentile(ms, 50):>8.1f}{percentile(ms, 95):>8.1f}")


def header(categories: list[int], reference: str) -> None:
    heads = [f"{c} {locomo.CATEGORIES.get(c, '?')}" for c in categories]
    print(f"{'profile':<34}" + "".join(f"{h:>15}" for h in heads)
          + f"{'all':>8}{'x first':>10}{'items':>7}{'p50 ms':>8}{'p95 ms':>8}")
    print(f"(recall: mean over questions of the share of evidence turns returned; x first: "
          f"ratio to {reference}; items: mean returned; latency of get_context)")


def report(scores: dict[str, Scores], categories: list[int], reference: str) -> None:
    header(categories, reference)
    base = scores[reference].mean()
    for name, s in scores.items():
        print(row(name, s, categories, base))


def report_folds(scores: dict[str, Scores], conversations: list[str], run: Run,
                 categories: list[int]) -> dict[str, Scores]:
    """Each held-out fold: the variant chosen on the other conversations, and the
    baselines, on the held-out one; then the mean of the folds. Returns the held-out
    answers of each row, pooled over the folds."""
    variants = {name: s for name, s in scores.items() if name.startswith(f"{run.tuned} ")}
    pooled: dict[str, Scores] = {}
    print(f"\nleave-one-conversation-out: {run.tuned} tuned over "
          + ", ".join(f"{k} {v}" for k, v in folds.GRID_AXES.items()))
    for fold in folds.folds(variants, conversations):
        print(f"\nheld out {fold.held_out} (tuned on {', '.join(fold.training)}): "
              f"chose {fold.chosen}")
        rows = {**{n: scores[n] for n in BASELINES if n in scores and "20" in n},
                f"{run.tuned} (chosen)": variants[fold.chosen]}
        held = {name: s.within({fold.held_out}) for name, s in rows.items()}
        header(categories, next(iter(held)))
        for name, s in held.items():
            print(row(name, s, categories, next(iter(held.values())).mean()))
            pooled.setdefault(name, Scores()).answers.extend(s.answers)
    print("\nmean of the held-out folds (recall per fold, then averaged; latency pooled)")
    for name, s in pooled.items():
        means = {c: _fold_mean(s, conversations, c) for c in [*categories, None]}
        ms = [v * 1000 for v in s.latency]
        print(f"{name:<34}" + "".join(f"{means[c]:>15.3f}" for c in categories)
              + f"{means[None]:>8.3f}{'':>17}{percentile(ms, 50):>8.1f}"
              + f"{percentile(ms, 95):>8.1f}")
    return pooled


def _fold_mean(s: Scores, conversations: list[str], category: int | None) -> float:
    values = [s.within({c}).mean(category) for c in conversations]
    values = [v for v in values if v == v]  # a fold without the category has no figure
    return sum(values) / len(values) if values else float("nan")


def describe(conversations: list[locomo.Conversation], evidence: locomo.EvidenceReport,
             categories: list[int]) -> None:
    counts = locomo.category_counts(conversations)
    turns = sum(len(c.turns) for c in conversations)
    print(f"{len(conversations)} conversations, {turns} turns; questions scored: "
          + ", ".join(f"cat {c}: {counts[c]}" for c in categories)
          + f" (total {sum(counts[c] for c in categories)})")
    print(f"evidence ids: {evidence.total} read, {len(evidence.rewritten)} rewritten "
          f"{evidence.rewritten}, {len(evidence.dropped)} dropped {evidence.dropped}; "
          f"{evidence.unscored} question(s) left without evidence are not scored")


def build(config: Config, conversations: list[locomo.Conversation], layout: str) -> dict[str, str]:
    """Load and embed the conversations into ``config``'s database, through the real
    writer and embed worker; returns the message ids (see :func:`locomo.load_into`)."""
    with running_writer(config), MemoryClient(config=config) as loader:
        began = time.perf_counter()
        ids = locomo.load_into(loader, conversations, layout)
        loaded = time.perf_counter()
        embed_through_workers(config, loader)
        print(f"loaded {len(ids)} messages in {loaded - began:.1f} s, embedded by the embed "
              f"worker in {time.perf_counter() - loaded:.1f} s; {failed_embeddings(loader)} "
              "failed")
    return ids


def prepared(config: Config, data: Path, conversations: list[locomo.Conversation],
             layout: str, cache: Path | None) -> dict[str, str]:
    """The loaded database at ``config.db_path``: built there, or copied from ``cache``
    (built there first when it is not yet), so that repeated runs embed once."""
    if cache is None:
        with private_redis() as url:
            return build(config.replace(redis_url=url), conversations, layout)
    key = corpus_key(data, layout, config)
    db, ids_file = cache / f"{key}.db", cache / f"{key}.ids.json"
    if not ids_file.exists():
        cache.mkdir(parents=True, exist_ok=True)
        for stale in cache.glob(f"{key}.db*"):
            stale.unlink()
        with private_redis() as url:
            ids = build(config.replace(redis_url=url, db_path=str(db)), conversations, layout)
        ids_file.write_bytes(orjson.dumps(ids))
    else:
        print(f"corpus read from the cache {db}")
    for suffix in ("", "-wal"):
        if Path(f"{db}{suffix}").exists():
            shutil.copyfile(f"{db}{suffix}", f"{config.db_path}{suffix}")
    loaded: dict[str, str] = orjson.loads(ids_file.read_bytes())
    return loaded


def corpus_key(data: Path, layout: str, config: Config) -> str:
    """What the cached corpus depends on: the data, the layout, the model, the schema and
    what the writer and the embed worker store."""
    digest = hashlib.sha256(data.read_bytes())
    digest.update(f"{layout}\0{config.embed.model_name}\0{config.embed.max_tokens}".encode())
    for name in (m.name for m in MIGRATIONS):
        digest.update(name.encode())
    return digest.hexdigest()[:16]


def evaluate(data: Path, categories: list[int], run: Run, *, layout: str = "session",
             cache: Path | None = None) -> dict[str, Scores]:
    """Load ``data`` into a fresh memq, then measure every profile (and the baselines)."""
    conversations, evidence = locomo.read(data, categories)
    describe(conversations, evidence, categories)
    if layout == "haystack":
        conversations = replicas.alike(conversations)
        print(f"layout: haystack (every conversation in one user, its speakers renamed to "
              f"{' and '.join(replicas.ALIKE)}; questions asked at user scope)")
    else:
        print(f"layout: {layout} (questions asked at {layout} scope)")
    base = load_config()
    embedder = embed_job.embedder(base.embed)  # one model: the worker's and the queries'
    embedder.load()
    with scratch_dir() as tmp:
        config = base.replace(db_path=str(tmp / "memq.db"))
        ids = prepared(config, data, conversations, layout, cache)
        with private_redis() as url, ExitStack() as stack:
            config = config.replace(redis_url=url)
            stack.enter_context(running_writer(config))
            clients = clients_for(config, run, embedder=embedder, stack=stack)
            scores = measure(clients, conversations, ids, layout)
    shown = {name: s for name, s in scores.items()
             if not run.folds or not name.startswith(f"{run.tuned} ")}
    report(shown, categories, reference=next(iter(shown)))
    if run.folds:
        report_folds(scores, [c.session_id for c in conversations], run, categories)
    return scores


def setting(text: str) -> tuple[str, float]:
    """``KEY=VALUE`` of ``--set``: a numeric ``[retrieval]`` setting, of its own type."""
    key, _, value = text.partition("=")
    kind = type(getattr(RetrievalConfig(), key, None))
    if kind not in (int, float):
        raise argparse.ArgumentTypeError(f"{key!r} is not a numeric [retrieval] setting")
    try:
        return key, kind(value)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{key}: {value!r} is not {kind.__name__}") from None


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--data", type=Path, required=True, help="a LoCoMo-format JSON file")
    parser.add_argument("--categories", type=lambda s: [int(c) for c in s.split(",")],
                        default=[1, 2, 3, 4], help="question categories (default 1,2,3,4)")
    parser.add_argument("--profiles", type=lambda s: s.split(","),
                        default=["tri-hybrid", "recall"], help="profiles to measure")
    parser.add_argument("--scope", choices=locomo.LAYOUTS, default="session",
                        help="session: one memq session per conversation; user: one per "
                             "LoCoMo session under one user, asked at user scope; haystack: "
                             "as user, every conversation in one user, speakers renamed alike")
    parser.add_argument("--haystack", action="store_const", const="haystack", dest="scope",
                        help="the same as --scope haystack")
    parser.add_argument("--folds", action="store_true",
                        help="leave-one-conversation-out tuning of the recall profile")
    parser.add_argument("--ablations", action="store_true",
                        help="also measure variants of the recall profile")
    parser.add_argument("--set", action="append", type=setting, default=[], dest="settings",
                        metavar="KEY=VALUE", help="a [retrieval] setting for every profile "
                        "measured, e.g. recall_name_penalty=0 (repeatable)")
    parser.add_argument("--cache", type=Path, default=None,
                        help="keep the loaded, embedded corpus in this directory and reuse it")
    args = parser.parse_args(argv)
    try:
        for name in args.profiles:  # an unknown one fails now, not after loading
            profile_for(dataclasses.replace(RetrievalConfig(), profile=name))
        run = Run(tuple(args.profiles), ablations=args.ablations, folds=args.folds,
                  settings=tuple(args.settings))
        run.variants(RetrievalConfig())  # a setting out of range fails now too
        evaluate(args.data, sorted(set(args.categories)), run, layout=args.scope,
                 cache=args.cache)
    except (locomo.DataError, MemqError) as exc:
        raise SystemExit(f"error: {exc}") from None


if __name__ == "__main__":
    main()
