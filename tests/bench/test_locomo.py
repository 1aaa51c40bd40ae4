"""The LoCoMo loader of bench/retrieval.py: shape, content, dates, evidence ids, bad files.

The file is a small LoCoMo-shaped one written by each test, not the development data.
"""

from __future__ import annotations

from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import orjson
import pytest

from bench import locomo


def conversation(**overrides: Any) -> dict[str, Any]:
    conv: dict[str, Any] = {
        "speaker_a": "Ana", "speaker_b": "Ben",
        "session_1_date_time": "1:56 pm on 8 May, 2023",
        "session_1": [
            {"speaker": "Ana", "dia_id": "D1:1", "text": "I started pottery classes!"},
            {"speaker": "Ben", "dia_id": "D1:2", "text": "Nice, what did you make?",
             "blip_caption": "a photo of a clay bowl", "img_url": ["x"]},
            {"speaker": "Ana", "dia_id": "D1:3", "text": "A lopsided bowl."},
        ],
        "session_2_date_time": "10:05 am on 1 June, 2023",
        "session_2": [
            {"speaker": "Ben", "dia_id": "D2:1", "text": "How is the bowl?"},
            {"speaker": "Ana", "dia_id": "D2:2", "text": "It holds my keys now."},
        ],
    }
    conv.update(overrides)
    return conv


def qa(evidence: list[Any], category: int = 4) -> dict[str, Any]:
    return {"question": "What did Ana make?", "answer": "a bowl", "evidence": evidence,
            "category": category}


def write(tmp_path: Path, data: Any) -> Path:
    path = tmp_path / "locomo.json"
    path.write_bytes(orjson.dumps(data))
    return path


def test_turns_become_messages_in_order_with_their_session_time(tmp_path: Path) -> None:
    path = write(tmp_path, [{"sample_id": "conv-x", "conversation": conversation(),
                             "qa": [qa(["D1:3"])]}])
    [conv], _ = locomo.read(path, [1, 2, 3, 4])
    assert conv.session_id == "conv-x"
    assert [t.dia_id for t in conv.turns] == ["D1:1", "D1:2", "D1:3", "D2:1", "D2:2"]
    assert conv.turns[0].content == "Ana: I started pottery classes!"
    assert conv.turns[1].content == ("Ben: Nice, what did you make? "
                                     "[image: a photo of a clay bowl]")
    assert [t.role for t in conv.turns] == ["user", "assistant", "user", "assistant", "user"]
    start = datetime(2023, 5, 8, 13, 56, tzinfo=UTC)
    assert [t.created_at for t in conv.turns[:3]] == [
        start, start.replace(microsecond=1), start.replace(microsecond=2)]
    assert conv.turns[3].created_at == datetime(2023, 6, 1, 10, 5, tzinfo=UTC)


def test_sessions_are_read_in_numeric_order(tmp_path: Path) -> None:
    conv = conversation()
    conv["session_10_date_time"] = "9:00 am on 2 June, 2023"
    conv["session_10"] = [{"speaker": "Ben", "dia_id": "D10:1", "text": "Later."}]
    path = write(tmp_path, [{"conversation": conv, "qa": []}])
    [read], _ = locomo.read(path, [4])
    assert read.session_id == "conv-0"
    assert read.turns[-1].dia_id == "D10:1"


def test_evidence_ids_are_normalised_or_dropped(tmp_path: Path) -> None:
    questions = [qa(["D1:3"]), qa(["D:1:3"]), qa(["D1:1; D2:2"]), qa(["D1:2,D1:2 D2:1"]),
                 qa(["D9:99", "D1:1"]), qa(["nonsense"]), qa([]), qa(["D1:3"], category=5)]
    path = write(tmp_path, [{"conversation": conversation(), "qa": questions}])
    [conv], report = locomo.read(path, [1, 2, 3, 4])
    assert [q.evidence for q in conv.questions] == [
        ("D1:3",), ("D1:3",), ("D1:1", "D2:2"), ("D1:2", "D2:1"), ("D1:1",)]
    assert report.dropped == ["D9:99", "nonsense"]
    assert report.unscored == 2  # "nonsense" alone, and no evidence at all
    assert "'D:1:3' -> D1:3" in report.rewritten
    assert "'D1:1; D2:2' -> D2:2" in report.rewritten
    assert report.total == 7  # category 5 is not read
    assert len(report.rewritten) == 5


def test_categories_are_chosen(tmp_path: Path) -> None:
    questions = [qa(["D1:1"], category=c) for c in (1, 2, 2, 3, 5)]
    path = write(tmp_path, [{"conversation": conversation(), "qa": questions}])
    conversations, _ = locomo.read(path, [2, 5])
    assert locomo.category_counts(conversations) == {2: 2, 5: 1}


@pytest.mark.parametrize(("data", "fragment"), [
    ({"conversation": {}}, "expected a JSON list"),
    (["x"], "conversation 0: expected an object with a 'conversation' object"),
    ([{"conversation": conversation(session_1_date_time="yesterday")}],
     "session_1_date_time: cannot read the date 'yesterday'"),
    ([{"conversation": conversation(session_2=[{"speaker": "Ana"}])}],
     "session_2 turn 0: needs speaker, dia_id and text"),
    ([{"conversation": conversation(session_2="hello")}], "session_2: expected a list"),
    ([{"conversation": conversation(), "qa": [{"answer": "x"}]}], "needs a question string"),
    ([{"conversation": conversation(), "qa": [qa("D1:1")]}], "evidence: expected a list"),
])
def test_a_file_of_another_shape_is_refused_with_where(
    tmp_path: Path, data: Any, fragment: str
) -> None:
    with pytest.raises(locomo.DataError, match=fragment):
        locomo.read(write(tmp_path, data), [1, 2, 3, 4])


def test_unreadable_file_is_a_data_error(tmp_path: Path) -> None:
    path = tmp_path / "broken.json"
    path.write_text("[{")
    with pytest.raises(locomo.DataError, match="cannot read JSON"):
        locomo.read(path, [1])
    with pytest.raises(locomo.DataError, match="cannot read JSON"):
        locomo.read(tmp_path / "missing.json", [1])
