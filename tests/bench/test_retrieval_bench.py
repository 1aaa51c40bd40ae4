"""bench/retrieval.py end to end: a small LoCoMo-shaped file, then (slow) the dev file.

Real parts throughout: the bench starts its own redis-server and writer, appends through
the client, embeds with the real model and asks get_context.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import orjson
import pytest

from bench import retrieval
from tests.conftest import LOCOMO

pytestmark = [pytest.mark.redis, pytest.mark.model]

DEV_FILE = Path(os.environ.get("MEMQ_LOCOMO", LOCOMO))
"""The development conversations (``MEMQ_LOCOMO`` overrides where a checkout keeps them)."""

FILLER = ["Work was busy today.", "I watched a film last night.", "The weather is nice.",
          "Traffic was terrible this morning.", "I cooked pasta for dinner."]


def turn(n: int, i: int, speaker: str, text: str) -> dict[str, Any]:
    return {"speaker": speaker, "dia_id": f"D{n}:{i}", "text": text}


def small_file(tmp_path: Path) -> Path:
    sessions: dict[str, Any] = {"speaker_a": "Ana", "speaker_b": "Ben"}
    for n in range(1, 4):
        sessions[f"session_{n}_date_time"] = f"{n}:00 pm on {n} May, 2023"
        sessions[f"session_{n}"] = [turn(n, i + 1, "Ana" if i % 2 else "Ben", text)
                                    for i, text in enumerate(FILLER * 2)]
    sessions["session_2"][3] = turn(2, 4, "Ben", "Did you ever try the pottery class?")
    sessions["session_2"][4] = turn(2, 5, "Ana", "Yes, I made a bowl for my keys.")
    sessions["session_3"][2] = turn(3, 3, "Ben", "My sister moved to Lisbon in June.")
    qa = [
        {"question": "Did Ana go to a pottery class?", "answer": "yes", "category": 4,
         "evidence": ["D:2:4", "D2:5"]},
        {"question": "Where did Ben's sister move?", "answer": "Lisbon", "category": 1,
         "evidence": ["D3:3; D9:1"]},
        {"question": "What is never said?", "answer": "-", "category": 5,
         "evidence": ["D1:1"]},
    ]
    path = tmp_path / "small.json"
    path.write_bytes(orjson.dumps([{"sample_id": "tiny", "conversation": sessions, "qa": qa}]))
    return path


def test_the_bench_runs_on_any_file_of_the_shape(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    scores = retrieval.evaluate(small_file(tmp_path), [1, 2, 3, 4], ["tri-hybrid", "recall"])
    out = capsys.readouterr().out
    assert list(scores) == [*retrieval.BASELINES, "tri-hybrid", "recall"]
    assert "1 conversations, 30 turns; questions scored: cat 1: 1, cat 2: 0" in out
    assert "'D:2:4' -> D2:4" in out
    assert "1 dropped ['D9:1']" in out
    assert "embedded by the embed worker in" in out
    assert "; 0 failed" in out
    recall = scores["recall"]
    assert recall.mean() == 1.0  # both questions: every evidence turn comes back
    assert len(recall.latency) == 2
    assert all(n <= 20 for n in recall.items)
    assert scores["tri-hybrid"].mean() < 1.0  # its cosine cut misses the match
    for name in scores:
        assert name in out


def test_the_bench_refuses_a_bad_file_or_profile(tmp_path: Path) -> None:
    bad = tmp_path / "bad.json"
    bad.write_text('{"not": "a list"}')
    with pytest.raises(SystemExit, match=r"error: .*expected a JSON list"):
        retrieval.main(["--data", str(bad)])
    with pytest.raises(SystemExit, match=r"error: .*profile 'best' is unknown"):
        retrieval.main(["--data", str(bad), "--profiles", "recall,best"])


@pytest.mark.slow
@pytest.mark.skipif(not DEV_FILE.exists(), reason=f"{DEV_FILE} is absent")
def test_recall_reaches_its_goal_on_the_development_file(
    capsys: pytest.CaptureFixture[str]
) -> None:
    scores = retrieval.evaluate(DEV_FILE, [1, 2, 3, 4], ["recall"], baselines=False)
    print(capsys.readouterr().out)
    assert sum(len(v) for v in scores["recall"].recall.values()) == 383
    assert scores["recall"].mean() >= 0.70
