"""The built-in extractive summariser and the key terms it keeps."""

from __future__ import annotations

import json
import os
import re
from datetime import UTC, datetime, timedelta
from functools import cache
from pathlib import Path
from typing import Any

import pytest

from memq.clock import to_rfc3339
from memq.config import EmbedConfig
from memq.errors import SummariserError
from memq.workers.extractive import ExtractiveSummariser
from memq.workers.keyterms import key_terms, split_sentences
from memq.workers.summarise import ChunkMessage, check, header
from tests.conftest import LOCOMO as DEFAULT_LOCOMO
from tests.conftest import MODEL_DIR

LOCOMO = Path(os.environ.get("MEMQ_LOCOMO", DEFAULT_LOCOMO))
"""The development conversations: read in place, never copied into the repository."""


@cache
def summariser() -> ExtractiveSummariser:
    return ExtractiveSummariser(EmbedConfig(model_dir=str(MODEL_DIR)), target_ratio=0.3)


def chunk(texts: list[str], start: datetime, step: timedelta = timedelta(minutes=1),
          ) -> list[ChunkMessage]:
    return [ChunkMessage(f"m{i}", "user" if i % 2 == 0 else "assistant", text,
                         to_rfc3339(start + i * step)) for i, text in enumerate(texts)]


# -- key terms (no model) ---------------------------------------------------------------


@pytest.mark.parametrize(
    ("sentences", "terms"),
    [
        (["Hey Gina! Good to see you.", "Wow, Jon, same here!"], ["Gina", "Jon"]),
        (["I lost my job at Door Dash this month."], ["Door Dash"]),
        (["Thanks, Caroline!", "Caroline went to the LGBTQ+ support group."],
         ["Caroline", "LGBTQ+"]),
        (["NASA called.", "Sounds great!"], ["NASA"]),  # an acronym opening a sentence
        (["We met on 25 May, 2023 and again on June 3rd.", "See you next Friday."],
         ["25 May, 2023", "June 3rd", "next Friday"]),
        (["It was in 2019, on 2024-02-01 or 3/4/22."], ["2019", "2024-02-01", "3/4/22"]),
        (["I paid $50 for 3 tickets and 10% more at 4:30pm."],
         ["$50", "3 tickets", "10%", "4:30pm"]),
        (["May I ask?", "I may go."], []),  # "May" alone is a verb, not a date
        (["Maria's dog is called Rex."], ["Maria", "Rex"]),
        (["Growing up, I saw it.", "Appreciate it!", "Can't wait. We're ready."], []),
    ],
)
def test_key_terms(sentences: list[str], terms: list[str]) -> None:
    assert key_terms(sentences) == terms


def test_sentences_split_on_ends_and_lines_but_not_titles() -> None:
    text = 'Dr. Lee called "Finding Freedom." It was great!\nReally? Yes'
    assert split_sentences(text) == [
        'Dr. Lee called "Finding Freedom."', "It was great!", "Really?", "Yes"]


def test_header_names_the_span() -> None:
    day = datetime(2023, 5, 25, 13, 14, tzinfo=UTC)
    assert header(chunk(["a"], day)) == "Summary of 1 message on 2023-05-25 13:14 UTC:"
    assert header(chunk(["a", "b"], day)) == (
        "Summary of 2 messages from 2023-05-25 13:14 to 13:15 UTC:")
    assert header(chunk(["a", "b"], day, timedelta(days=2))) == (
        "Summary of 2 messages from 2023-05-25 13:14 to 2023-05-27 13:14 UTC:")


# -- summaries (real model) -------------------------------------------------------------

TRIP = [
    "We finally booked the trip to Kyoto for 14 October, flying with Finnair via Helsinki.",
    "How long are you staying? Last time you said the budget was tight.",
    "Twelve nights. The budget is $3,200 for both of us, hotels included.",
    "Nice. Will you visit Nara too? The deer park is a short train ride away.",
    "Yes, on the second Tuesday; our friend Aiko recommended a ryokan near Fushimi Inari.",
    "Ok, sounds good.",
    "I also need to renew my passport before September, it expires soon.",
    "Don't forget travel insurance; my sister Marta used World Nomads last year.",
]


@pytest.mark.model
def test_summary_is_shorter_verbatim_and_keeps_names_dates_and_numbers() -> None:
    messages = chunk(TRIP, datetime(2024, 3, 1, 9, 0, tzinfo=UTC))
    summary = summariser().summarise(messages)
    content = check(messages, summary)  # the guard rails pass: shorter, not empty
    assert len(content) < 0.6 * sum(len(t) for t in TRIP)
    for term in ["Kyoto", "14 October", "Finnair", "Helsinki", "$3,200", "Nara", "Aiko",
                 "Fushimi Inari", "September", "Marta", "World Nomads", "2024-03-01"]:
        assert term in content, term
    lines = [line for line in summary.text.splitlines() if not line.startswith("Also ")]
    assert lines
    for line in lines:  # nothing is made up: every sentence is one of the conversation's
        role, _, said = line.partition(": ")
        assert role in {"user", "assistant"}
        for sentence in split_sentences(said):
            assert any(sentence in text for text in TRIP), sentence
    assert "Ok, sounds good." not in content


@pytest.mark.model
def test_a_chunk_over_several_days_dates_its_lines() -> None:
    messages = chunk(TRIP, datetime(2024, 3, 1, 9, 0, tzinfo=UTC), timedelta(hours=20))
    text = summariser().summarise(messages).text
    dated = [line for line in text.splitlines() if not line.startswith("Also ")]
    assert all(re.match(r"\[2024-03-0\d\] (user|assistant): ", line) for line in dated)


@pytest.mark.model
def test_nothing_to_summarise_is_rejected() -> None:
    messages = chunk(["", "   "], datetime(2024, 3, 1, tzinfo=UTC))
    summary = summariser().summarise(messages)
    with pytest.raises(SummariserError, match="empty"):
        check(messages, summary)


# -- a real multi-turn conversation -------------------------------------------------------

LOCOMO_SESSIONS = {
    # (conversation, session): terms a reader of the session would expect to survive
    ("conv-26", 2): ["Caroline", "Melanie", "Mel", "LGBTQ", "Saturday"],
    ("conv-30", 1): ["Jon", "Gina", "Door Dash", "Finding Freedom", "Friday"],
    ("conv-41", 1): ["John", "Maria"],
    ("conv-41", 3): ["John", "Maria"],
}


def locomo_chunk(conversation: dict[str, Any], number: int) -> list[ChunkMessage]:
    when = datetime.strptime(conversation[f"session_{number}_date_time"],
                             "%I:%M %p on %d %B, %Y").replace(tzinfo=UTC)
    turns = conversation[f"session_{number}"]
    return [ChunkMessage(turn["dia_id"],
                         "user" if turn["speaker"] == conversation["speaker_a"] else "assistant",
                         turn["text"], to_rfc3339(when + timedelta(seconds=30 * i)))
            for i, turn in enumerate(turns)]


@pytest.mark.model
@pytest.mark.parametrize(("sample", "number"), sorted(LOCOMO_SESSIONS))
def test_a_real_conversation_keeps_its_named_entities_and_dates(sample: str, number: int) -> None:
    if not LOCOMO.exists():
        pytest.skip(f"{LOCOMO} is absent")
    data = {c["sample_id"]: c["conversation"] for c in json.loads(LOCOMO.read_text())}
    conversation = data[sample]
    messages = locomo_chunk(conversation, number)
    content = check(messages, summariser().summarise(messages))
    day = datetime.strptime(conversation[f"session_{number}_date_time"],
                            "%I:%M %p on %d %B, %Y").strftime("%Y-%m-%d")
    for term in [*LOCOMO_SESSIONS[sample, number], day]:
        assert term in content, term
    assert len(content) < 0.5 * sum(len(m.content) for m in messages)
