"""An HNSW index (usearch) against memq's own vector search, on real conversations.

    .venv/bin/python bench/ann.py [--size 100000] [--ef 256,1024,2048]

The history is the one ``bench/context.py --realistic`` builds (one user, the LoCoMo
development conversations and their look-alike copies, every turn with its real vector
from ``--cache``), loaded by a reader as ``get_context`` loads it. For the turns' vectors
and for their contextual keys (full, 384 dimensions; :mod:`store.read.neighbourhoods`),
each question asks for 200 candidates, which ``get_context`` then scores exactly:

- memq: the turns' exact search (:meth:`VectorIndex.search`), and the keys' candidates as a
  projected search finds them (the leaders of the projection's first block);
- HNSW: usearch's index (``--dtype``, ``--connectivity``), at each ``--ef``
  (``expansion_search``), built on one thread as a reader would build it on loading.

Printed, in one run: what share of each question's exact best 50 (a float32 scan of every
vector) the 200 candidates hold, mean and lowest; the time to find them, p50 / p95, and
its ratio to memq's; the HNSW's build time and how much the process grew building it,
against the reader's first load of the scope and its vector cache.
"""

from __future__ import annotations

import os

# Before numpy is imported, or the BLAS library has already started its threads.
os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")
os.environ.setdefault("OMP_NUM_THREADS", "1")

import argparse
import sys
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench import context_realistic as realistic
from bench import locomo, replicas
from bench.common import memory_kib, percentiles_ms, private_redis, scratch_dir
from bench.text_vectors import TextVectors
from memq.config import Config, EmbedConfig
from memq.embedding import Embedder
from memq.store.read import neighbourhoods
from memq.store.read.neighbourhoods import Neighbourhoods
from memq.store.read.scope import Scope
from memq.store.read.vector_index import VectorIndex

CANDIDATES = 200
"""Candidates a search finds for the best 50 (neighbourhoods.CANDIDATES_PER_RESULT x 50)."""
BEST = 50
CHUNK = 8192

Search = Callable[[np.ndarray], list[int]]


def exact_best(matrix: np.ndarray, queries: np.ndarray) -> list[set[int]]:
    """Each query's best :data:`BEST` rows of ``matrix`` by a float32 scan."""
    scores = queries @ matrix.T
    return [set(np.argpartition(-row, BEST)[:BEST].tolist()) for row in scores]


def measure(search: Search, queries: np.ndarray, exact: list[set[int]]
            ) -> tuple[float, float, list[float]]:
    """The share of the exact best held by the candidates (mean, lowest), and the times."""
    held, times = [], []
    for query, best in zip(queries, exact, strict=True):
        began = time.perf_counter()
        found = search(query)
        times.append(time.perf_counter() - began)
        held.append(len(best & set(found)) / BEST)
    return float(np.mean(held)), min(held), times


def hnsw(matrix: np.ndarray, args: argparse.Namespace) -> tuple[Any, float, float]:
    """The index of ``matrix``'s rows, its build seconds and the MiB the process grew."""
    # Here, and after onnxruntime: with usearch 2.26 (its numkong library) loaded first,
    # importing onnxruntime 1.32, as the embedding model does, kills the process (SIGSEGV).
    import onnxruntime  # noqa: F401
    from usearch.index import Index

    before = memory_kib("RssAnon")
    index = Index(ndim=matrix.shape[1], metric="ip", dtype=args.dtype,
                  connectivity=args.connectivity, expansion_add=args.expansion_add)
    began = time.perf_counter()
    index.add(np.arange(len(matrix)), matrix, threads=1)
    return index, time.perf_counter() - began, (memory_kib("RssAnon") - before) / 1024


def keys_matrix(keys: Neighbourhoods, ids: list[str]) -> np.ndarray:
    """Every turn's full contextual key, in the order of ``ids``."""
    return np.vstack([keys._keys(ids[at:at + CHUNK], keys.turns.vectors)
                      for at in range(0, len(ids), CHUNK)]).astype(np.float32)


def memq_searches(index: VectorIndex, keys: Neighbourhoods, rows: dict[str, int]
                  ) -> tuple[Search, Search]:
    """memq's candidates for the turns (exact) and for the keys (as get_context finds
    them), as rows of the matrices."""
    def turns(query: np.ndarray) -> list[int]:
        return [rows[i] for i, _ in index.search(query, -np.inf, CANDIDATES)]

    def contextual(query: np.ndarray) -> list[int]:
        if keys._axes is None:  # a small scope: its keys are whole, the search exact
            return [rows[i] for i, _ in keys.search(query, -np.inf, CANDIDATES)]
        projected = np.asarray(query, dtype=np.float32) @ keys._axes
        return [rows[i] for i in keys.index.leaders(projected, CANDIDATES,
                                                    neighbourhoods.LEADERS)]
    return turns, contextual


def compare(name: str, matrix: np.ndarray, ours: Search, queries: np.ndarray,
            args: argparse.Namespace) -> None:
    exact = exact_best(matrix, queries)
    share, lowest, times = measure(ours, queries, exact)
    base50, base95 = percentiles_ms(times)
    print(f"  {name:<5} memq{'':<20} holds {share:.4f} (lowest {lowest:.2f})   "
          f"p50 {base50:6.2f} ms  p95 {base95:6.2f} ms")
    index, build_s, grown = hnsw(matrix, args)
    for ef in args.ef:
        index.expansion_search = ef
        share, lowest, times = measure(
            lambda q: index.search(q, CANDIDATES, threads=1).keys.tolist(), queries, exact)
        p50, p95 = percentiles_ms(times)
        print(f"  {name:<5} HNSW ef {ef:<16,} holds {share:.4f} (lowest {lowest:.2f})   "
              f"p50 {p50:6.2f} ms  p95 {p95:6.2f} ms   x{p50 / base50:.2f} / "
              f"x{p95 / base95:.2f} memq's")
    print(f"  {name:<5} HNSW built in {build_s:.1f} s on one thread; the process grew "
          f"{grown:.0f} MiB")


def run(args: argparse.Namespace, store: TextVectors, originals: list[locomo.Conversation],
        asked: list[realistic.Asked], config: Config, workdir: Path) -> None:
    history = replicas.history(originals, args.size)
    matrix, _ = realistic.turn_vectors(history, store, args.embed_up_to)
    path = workdir / "ann.db"
    realistic.build(path, history, matrix, config)
    session = asked[0].conversation.memq_session(None, "user")
    scope = Scope(session, "user", realistic.USER)
    with realistic.reader(config.replace(db_path=str(path)), asked) as client:
        before, began = memory_kib("RssAnon"), time.perf_counter()
        client.get_context(session, asked[0].question.text, scope="user")
        cold, grown = time.perf_counter() - began, (memory_kib("RssAnon") - before) / 1024
        entry = client.vector_cache._entries[scope.key]
        keys = entry.keys
        assert keys is not None, "the recall profile searches the turns' contextual keys"
        ids = list(entry.index._ids)
        print(f"\n{len(ids):,} turns in one user; {len(asked)} questions, {CANDIDATES} "
              f"candidates each; the share of the exact best {BEST} they hold")
        print(f"  memq's reader loaded them (vectors and keys) in {cold:.1f} s with a "
              f"question; the process grew {grown:.0f} MiB")
        queries = np.stack([a.vector for a in asked]).astype(np.float32)
        turns, contextual = memq_searches(entry.index, keys, {i: r for r, i in enumerate(ids)})
        compare("turns", entry.index.vectors(ids).astype(np.float32), turns, queries, args)
        compare("keys", keys_matrix(keys, ids), contextual, queries, args)


def numbers(text: str) -> list[int]:
    return [int(part) for part in text.split(",")]


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--size", type=int, default=100_000, help="turns in the history")
    parser.add_argument("--calls", type=int, default=200, help="questions asked")
    parser.add_argument("--ef", type=numbers, default=[256, 1024, 2048])
    parser.add_argument("--dtype", default="i8", choices=["i8", "f16", "f32"])
    parser.add_argument("--connectivity", type=int, default=32)
    parser.add_argument("--expansion-add", type=int, default=128)
    parser.add_argument("--data", type=Path, default=Path("../shared/data/locomo-dev.json"))
    parser.add_argument("--cache", type=Path, default=Path(".bench-cache"))
    parser.add_argument("--embed-up-to", type=int, default=110_000)
    parser.add_argument("--model-dir", default="models/all-MiniLM-L6-v2")
    args = parser.parse_args(argv)
    originals, _ = locomo.read(args.data, [1, 2, 3, 4])
    config = Config(embed=EmbedConfig(model_dir=args.model_dir))
    store = TextVectors(args.cache, Embedder(EmbedConfig(model_dir=args.model_dir, threads=2)))
    asked = realistic.questions(originals, store, args.calls)
    print(f"HNSW: usearch, {args.dtype}, connectivity {args.connectivity}, expansion_add "
          f"{args.expansion_add}; one BLAS thread")
    with private_redis() as url, scratch_dir() as workdir:
        run(args, store, originals, asked, config.replace(redis_url=url), workdir)


if __name__ == "__main__":
    main()
