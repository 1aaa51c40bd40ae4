"""bench/replicas.py: a user's long history made of renamed, earlier copies of LoCoMo."""

from __future__ import annotations

from pathlib import Path

import pytest

from bench import locomo, replicas
from tests.bench.test_retrieval_bench import small_file


@pytest.fixture
def originals(tmp_path: Path) -> list[locomo.Conversation]:
    conversations, _ = locomo.read(small_file(tmp_path, conversations=2), [1, 2, 3, 4])
    return conversations


def test_copies_rename_both_speakers_everywhere_and_come_before_the_originals(
    originals: list[locomo.Conversation]
) -> None:
    history = replicas.history(originals, 200)
    assert history[-2:] == originals  # the newest: the questions are theirs
    copies = history[:-2]
    assert replicas.count(history) >= 200 > replicas.count(history) - len(copies[0].turns)
    for copy in copies:
        assert "~" in copy.session_id
        assert copy.questions == []
        text = " ".join(t.content for t in copy.turns)
        assert "Ana" not in text.split()
        assert "Ben" not in text
        first, second = replicas.speakers(copy)
        assert first in replicas.NAMES
        assert second in replicas.NAMES
        assert first != second
        original = next(c for c in originals if c.session_id == copy.session_id.split("~")[0])
        assert [t.dia_id for t in copy.turns] == [t.dia_id for t in original.turns]
        assert max(t.created_at for t in copy.turns) < max(t.created_at for t in original.turns)
    assert len({replicas.speakers(c) for c in copies}) == len(copies)  # other people each


def test_fewer_turns_than_the_originals_keep_their_latest_sessions(
    originals: list[locomo.Conversation]
) -> None:
    history = replicas.history(originals, 40)
    assert replicas.count(history) <= 40
    for cut, whole in zip(history, originals, strict=True):
        kept = {t.session for t in cut.turns}
        assert kept
        assert max(kept) == max(t.session for t in whole.turns)


def test_pairs_are_distinct_names_and_cycle() -> None:
    pairs = [replicas.pair(k) for k in range(replicas.PAIRS)]
    assert len(set(pairs)) == replicas.PAIRS
    assert all(a != b for a, b in pairs)
    assert replicas.pair(replicas.PAIRS) == replicas.pair(0)


def test_alike_renames_every_conversation_and_its_questions_to_the_same_two(
    originals: list[locomo.Conversation]
) -> None:
    renamed = replicas.alike(originals)
    for before, after in zip(originals, renamed, strict=True):
        assert replicas.speakers(after) == replicas.ALIKE
        assert after.session_id == before.session_id
        assert [t.dia_id for t in after.turns] == [t.dia_id for t in before.turns]
        assert [q.evidence for q in after.questions] == [q.evidence for q in before.questions]
    questions = [q.text for c in renamed for q in c.questions]
    assert "Where did Avery's sister move?" in questions  # Ben spoke first
    assert not any("Ben" in q or "Ana" in q for q in questions)
