"""Long tool outputs: one vector of their first 256 tokens, several vectors, or words?

    .venv/bin/python bench/long_texts.py [--messages 400] [--queries 300] [--data LOCOMO]

An agent stream (``bench/agent_mix.py``, seeded) is stored in one session through a real
writer. For random lines of its tool outputs, a query is made of the line's words without
its numbers and ids (what someone recalling the line would type), and each way of searching
ranks the session's messages; a hit is the tool output the line came from, within the top
5 or 10. Hits are split by where the line sits in its output (first, middle, last third):

- ``head``: one vector per message, of its first 256 tokens (what memq stores);
- ``chunks``: one vector per run of whole lines of up to 256 tokens, so every part of an
  output is embedded; a message scores its best chunk;
- ``head+tail``: the first and the last of those chunks;
- ``lexical``: memq's lexical index (FTS5, BM25 over the whole text), as ``get_context``'s
  ``recall`` profile reads it.

It also prints what each costs: vectors per tool output and seconds in the model (one
thread) to embed the stream.
"""

from __future__ import annotations

import os

for _var in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS"):
    os.environ[_var] = "1"  # before numpy and onnxruntime load
os.environ["TOKENIZERS_PARALLELISM"] = "false"

import argparse  # noqa: E402 - the thread settings above must come first
import random  # noqa: E402
import re  # noqa: E402
import sys  # noqa: E402
import tempfile  # noqa: E402
import time  # noqa: E402
from collections.abc import Callable  # noqa: E402
from dataclasses import dataclass  # noqa: E402
from pathlib import Path  # noqa: E402

import numpy as np  # noqa: E402

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from bench.agent_mix import LOCOMO, agent_mix  # noqa: E402
from memq import MemoryClient  # noqa: E402
from memq.config import Config, EmbedConfig  # noqa: E402
from memq.embedding import Embedder  # noqa: E402
from memq.store.read.scope import Scope  # noqa: E402
from memq.testing import RedisServer, WriterThread  # noqa: E402

MODEL_DIR = Path(os.environ.get("MEMQ_EMBED_MODEL_DIR", ROOT / "models" / "all-MiniLM-L6-v2"))
SESSION = "long-texts"
THIRDS = ("first", "middle", "last")


@dataclass(frozen=True)
class Query:
    text: str
    source: int  # index of the tool output in the stream
    third: int  # 0, 1, 2: where the line sits in its output


@dataclass
class Vectors:
    """One row per vector, with the message it belongs to; seconds the model took."""

    owners: np.ndarray
    matrix: np.ndarray
    model_s: float


def chunks(embedder: Embedder, text: str) -> list[str]:
    """Runs of whole lines of at most ``max_tokens`` tokens ([CLS] and [SEP] included)."""
    lines = text.split("\n")
    budget = embedder.config.max_tokens - 2
    sizes = [n - 2 for n in embedder.token_counts(lines)]
    out: list[str] = []
    run: list[str] = []
    used = 0
    for line, size in zip(lines, sizes, strict=True):
        if run and used + size > budget:
            out.append("\n".join(run))
            run, used = [], 0
        run.append(line)
        used += size
    return [*out, "\n".join(run)]


def embed_pieces(embedder: Embedder, pieces: list[tuple[int, str]]) -> Vectors:
    started = time.process_time()
    matrix = embedder.embed([text for _, text in pieces])
    return Vectors(np.array([owner for owner, _ in pieces]), matrix,
                   time.process_time() - started)


def queries(texts: list[str], tools: list[int], count: int, seed: int) -> list[Query]:
    rng = random.Random(seed)
    found: list[Query] = []
    while len(found) < count:
        source = rng.choice(tools)
        lines = texts[source].split("\n")
        at = rng.randrange(len(lines))
        words = [w for w in lines[at].split() if not re.search(r"\d", w)]
        if len(words) >= 3:
            found.append(Query(" ".join(words), source, min(2, 3 * at // len(lines))))
    return found


def semantic_rank(vectors: Vectors, query: np.ndarray) -> Callable[[int], int]:
    scores = vectors.matrix @ query
    best: dict[int, float] = {}
    for owner, score in zip(vectors.owners.tolist(), scores.tolist(), strict=True):
        best[owner] = max(score, best.get(owner, -2.0))
    order = sorted(best, key=best.__getitem__, reverse=True)
    return lambda source: order.index(source) + 1


def lexical_ranks(texts: list[str], found: list[Query]) -> list[int]:
    """Rank of each query's source by memq's lexical index (11 = not in the top 10)."""
    with tempfile.TemporaryDirectory(prefix="memq-bench-") as tmp, \
            RedisServer(Path(tmp)) as server:
        config = Config(redis_url=server.url, db_path=str(Path(tmp) / "memq.db"),
                        embed=EmbedConfig(model_dir=str(MODEL_DIR)))
        with WriterThread(config), MemoryClient(config=config) as client:
            with client.batched():
                ids = [client.append(SESSION, "tool" if "\n" in t else "user", t)
                       for t in texts]
            client.flush(timeout=60)
            ranks = []
            for q in found:
                hits = [mid for mid, _ in client.sources.lexical_scores(Scope(SESSION), q.text, 10)]
                ranks.append(hits.index(ids[q.source]) + 1 if ids[q.source] in hits else 11)
            return ranks


def report(name: str, ranks: list[int], found: list[Query]) -> str:
    r = np.array(ranks)
    thirds = np.array([q.third for q in found])
    parts = [hits(r[thirds == t]) for t in range(3)]
    return f"| {name} | {hits(r)} | " + " | ".join(parts) + " |"


def hits(ranks: np.ndarray) -> str:
    """Top 5 / top 10 hit rates; "-" where no query fell (a few queries miss a third)."""
    if not len(ranks):
        return "- / -"
    return f"{np.mean(ranks <= 5):.2f} / {np.mean(ranks <= 10):.2f}"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--messages", type=int, default=400)
    parser.add_argument("--queries", type=int, default=300)
    parser.add_argument("--seed", type=int, default=5)
    parser.add_argument("--data", type=Path, default=LOCOMO,
                        help="LoCoMo file for the conversation turns (generated without it)")
    args = parser.parse_args()
    if args.messages < 10 or args.queries < 1:
        parser.error("--messages must be at least 10 and --queries at least 1")
    texts = agent_mix(args.messages, args.seed, args.data)
    tools = [i for i, t in enumerate(texts) if "\n" in t]
    if not tools:
        parser.error("the stream has no tool output: ask for more messages")
    embedder = Embedder(EmbedConfig(model_dir=str(MODEL_DIR)))
    embedder.load()
    split = {i: chunks(embedder, texts[i]) for i in tools}
    head = embed_pieces(embedder, list(enumerate(texts)))
    every = embed_pieces(embedder, [(i, c) for i, t in enumerate(texts)
                                    for c in split.get(i, [t])])
    ends = [row for row, owner in enumerate(every.owners.tolist())
            if row == 0 or row == len(every.owners) - 1 or every.owners[row - 1] != owner
            or every.owners[row + 1] != owner]
    head_tail = Vectors(every.owners[ends], every.matrix[ends], 0.0)
    found = queries(texts, tools, args.queries, args.seed)
    ranks: dict[str, list[int]] = {"head (memq)": [], "chunks": [], "head+tail": []}
    for q in found:
        vector = embedder.embed([q.text])[0]
        for name, vectors in zip(ranks, (head, every, head_tail), strict=True):
            ranks[name].append(semantic_rank(vectors, vector)(q.source))
    ranks["lexical (memq)"] = lexical_ranks(texts, found)
    per_tool = sum(len(c) for c in split.values()) / len(tools)
    print(f"{len(texts)} messages, {len(tools)} tool outputs of 20-60 lines; "
          f"{len(found)} queries from random lines of them")
    print(f"vectors per tool output: head 1, head+tail {min(2.0, per_tool):.1f}, chunks "
          f"{per_tool:.1f}; model CPU to embed the stream: head {head.model_s:.1f} s, chunks "
          f"{every.model_s:.1f} s ({every.model_s / head.model_s:.1f}x)")
    print()
    print("| search | top 5 / top 10 | line in the first third | middle third | last third |")
    print("|---|---|---|---|---|")
    for name, found_ranks in ranks.items():
        print(report(name, found_ranks, found))


if __name__ == "__main__":
    main()
