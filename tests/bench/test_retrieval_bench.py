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


def conversation(sample_id: str) -> dict[str, Any]:
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
    return {"sample_id": sample_id, "conversation": sessions, "qa": qa}


def small_file(tmp_path: Path, conversations: int = 1) -> Path:
    path = tmp_path / "small.json"
    path.write_bytes(orjson.dumps([conversation(f"tiny{n or ''}") for n in range(conversations)]))
    return path


def test_the_bench_runs_on_any_file_of_the_shape(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    scores = retrieval.evaluate(small_file(tmp_path), [1, 2, 3, 4], retrieval.Run())
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
    assert all(n <= 30 for n in recall.items)  # the 10-turn window and 20 more at most
    assert scores["tri-hybrid"].mean() < 1.0  # its cosine cut misses the match
    for name in scores:
        assert name in out


def test_user_scope_folds_and_the_cache(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Each LoCoMo session its own memq session of one user, asked from the last one at
    user scope; every conversation held out once; the second run reads the cached corpus."""
    data, cache = small_file(tmp_path, conversations=2), tmp_path / "cache"
    run = retrieval.Run(("recall",), folds=True)
    first = retrieval.evaluate(data, [1, 2, 3, 4], run, layout="user", cache=cache)
    out = capsys.readouterr().out
    assert "layout: user" in out
    assert "embedded by the embed worker" in out
    assert "held out tiny (tuned on tiny1)" in out
    assert "held out tiny1 (tuned on tiny)" in out
    assert "mean of the held-out folds" in out
    # The evidence sits in sessions 2 and 3, the questions are asked from session 3.
    assert first["recall"].mean() == 1.0
    assert first["BM25 top-20"].mean() == 1.0
    again = retrieval.evaluate(data, [1, 2, 3, 4], run, layout="user", cache=cache)
    out = capsys.readouterr().out
    assert "corpus read from the cache" in out
    assert "embedded by" not in out
    assert again["recall"].mean() == 1.0


def test_the_haystack_puts_every_conversation_in_one_user_with_the_same_two_names(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    data = small_file(tmp_path, conversations=2)
    scores = retrieval.evaluate(data, [1, 2, 3, 4], retrieval.Run(("recall",)),
                                layout="haystack")
    out = capsys.readouterr().out
    assert "layout: haystack (every conversation in one user, its speakers renamed to " \
           "Avery and Rowan" in out
    # The two conversations are the same text: a question finds its evidence in either,
    # and only its own counts.
    assert 0.0 < scores["recall"].mean() <= 1.0
    assert len(scores["recall"].latency) == 4


def test_the_bench_refuses_a_bad_file_or_profile(tmp_path: Path) -> None:
    bad = tmp_path / "bad.json"
    bad.write_text('{"not": "a list"}')
    with pytest.raises(SystemExit, match=r"error: .*expected a JSON list"):
        retrieval.main(["--data", str(bad)])
    with pytest.raises(SystemExit, match=r"error: .*profile 'best' is unknown"):
        retrieval.main(["--data", str(bad), "--profiles", "recall,best"])


def test_a_setting_changes_every_profile_measured_and_a_bad_one_is_refused(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    run = retrieval.Run(("recall",), folds=True, settings=(("recall_name_penalty", 0.5),
                                                           ("recall_budget", 12)))
    variants = run.variants(retrieval.RetrievalConfig())
    assert {settings.recall_name_penalty for settings, _ in variants.values()} == {0.5}
    assert {settings.recall_budget for settings, _ in variants.values()} == {12}
    assert retrieval.setting("recall_budget=12") == ("recall_budget", 12)
    bad = tmp_path / "bad.json"
    bad.write_text("[]")
    for value, said in (("recall_budgte=3", "'recall_budgte' is not a numeric"),
                        ("profile=recall", "'profile' is not a numeric"),
                        ("recall_budget=2.5", "recall_budget: '2.5' is not int")):
        with pytest.raises(SystemExit):
            retrieval.main(["--data", str(bad), "--set", value])
        assert said in capsys.readouterr().err
    with pytest.raises(SystemExit, match=r"recall_name_penalty must be between 0\.0 and 1\.0"):
        retrieval.main(["--data", str(bad), "--set", "recall_name_penalty=2"])


@pytest.mark.slow
@pytest.mark.skipif(not DEV_FILE.exists(), reason=f"{DEV_FILE} is absent")
def test_recall_reaches_its_goal_on_a_development_conversation(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """One real conversation (of the three: its 419 turns are what embedding costs, a
    third of the file's), whose questions span the four categories; the whole file's
    figures are measured by the bench itself (README, docs/retrieval.md)."""
    one = tmp_path / "conv-26.json"
    whole = orjson.loads(DEV_FILE.read_bytes())
    one.write_bytes(orjson.dumps([c for c in whole if c["sample_id"] == "conv-26"]))
    scores = retrieval.evaluate(one, [1, 2, 3, 4], retrieval.Run(("recall",), False))
    print(capsys.readouterr().out)
    recall = scores["recall"].recall
    assert sorted(recall) == [1, 2, 3, 4]
    assert sum(len(v) for v in recall.values()) == 150
    assert scores["recall"].mean() >= 0.80  # 0.842 when this was written
