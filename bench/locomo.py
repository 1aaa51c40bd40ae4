"""Reading a LoCoMo-format file and loading it into memq through the real client.

The shape (a JSON list, one object per conversation): ``conversation`` holds
``speaker_a``, ``speaker_b`` and, for n = 1, 2, ..., ``session_n_date_time`` ("1:56 pm on
8 May, 2023") and ``session_n`` (turns ``{speaker, dia_id, text[, blip_caption]}``);
``qa`` holds ``{question, answer, evidence: [dia_id, ...], category}``.

Three layouts. ``session``: each conversation becomes one memq session (its ``sample_id``,
else ``conv-<index>``). ``user``: each LoCoMo session n becomes its own memq session
``<conversation>-s<n>``, all of them under one ``user_id``, the conversation's id; the
questions are asked at user scope from the last session. ``haystack``: as ``user``, but
every conversation under the one user :data:`HAYSTACK_USER` (the caller renames their
speakers alike, :func:`bench.replicas.alike`, so the others are look-alike distractors).
Every way, each turn is one message, in order, created at its session's date and time plus as many
microseconds as the turn's position in the session (so timestamps alone keep the turns'
order, which ids created within one millisecond would not). A turn's content is
``"<speaker>: <text>"``, plus ``" [image: <caption>]"`` when it carries an image
caption: the speaker's name is part of what was said to whom, and the questions name
people. ``speaker_a`` speaks as ``user``, anyone else as ``assistant``.

Evidence ids are normalised, then checked against the conversation's turns:

- a field holding several ids ("D8:6; D9:17") is split on ``;``, ``,`` and spaces;
- a stray colon after the ``D`` ("D:11:26") is dropped, giving "D11:26";
- an id that still does not name a turn of its conversation is dropped and counted.

A question left without evidence is not scored (and counted).
"""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import orjson

from memq import MemoryClient

CATEGORIES = {1: "multi-hop", 2: "temporal", 3: "open-domain", 4: "single-hop",
              5: "adversarial"}
"""LoCoMo's question categories."""

DATE_FORMATS = ("%I:%M %p on %d %B, %Y", "%I:%M %p on %d %B %Y", "%I:%M %p on %d %b, %Y",
                "%I:%M %p on %d %b %Y")
"""How ``session_n_date_time`` is written ("1:56 pm on 8 May, 2023")."""

_EVIDENCE = re.compile(r"D:?(\d+):(\d+)")


class DataError(ValueError):
    """The file is not of the LoCoMo shape; the message says where."""


LAYOUTS = ("session", "user", "haystack")
"""How conversations are stored: one memq session each, or one per LoCoMo session under
a user per conversation, or under one user for all."""

HAYSTACK_USER = "haystack"


def scope_of(layout: str) -> str:
    """The ``get_context`` scope questions are asked at in ``layout``."""
    return "session" if layout == "session" else "user"


@dataclass(frozen=True)
class Turn:
    dia_id: str
    role: str
    content: str
    created_at: datetime
    session: int = 1
    """The LoCoMo session number (n of ``session_n``)."""


@dataclass(frozen=True)
class Question:
    text: str
    category: int
    evidence: tuple[str, ...]


@dataclass
class Conversation:
    session_id: str
    turns: list[Turn]
    questions: list[Question]

    def memq_session(self, turn: Turn | None, layout: str) -> str:
        """The memq session of ``turn`` (None: the session questions are asked from)."""
        if layout == "session":
            return self.session_id
        number = turn.session if turn is not None else max(t.session for t in self.turns)
        return f"{self.session_id}-s{number}"


@dataclass
class EvidenceReport:
    """What normalising the evidence ids did, for the benchmark's output."""

    total: int = 0
    rewritten: list[str] = field(default_factory=list)
    dropped: list[str] = field(default_factory=list)
    unscored: int = 0


def read(path: Path, categories: Iterable[int]) -> tuple[list[Conversation], EvidenceReport]:
    """Parse ``path``; keep questions of ``categories``; normalise their evidence."""
    try:
        data = orjson.loads(path.read_bytes())
    except (OSError, orjson.JSONDecodeError) as exc:
        raise DataError(f"{path}: cannot read JSON: {exc}") from exc
    if not isinstance(data, list):
        raise DataError(f"{path}: expected a JSON list of conversations")
    wanted, report = set(categories), EvidenceReport()
    conversations = []
    for index, raw in enumerate(data):
        where = f"{path.name} conversation {index}"
        conversation = _conversation(raw, index, where)
        turn_ids = {t.dia_id for t in conversation.turns}
        for qa in _list(raw.get("qa", []), f"{where} qa"):
            question = _question(qa, where, turn_ids, wanted, report)
            if question is not None and question.evidence:
                conversation.questions.append(question)
            elif question is not None:
                report.unscored += 1
        conversations.append(conversation)
    return conversations, report


def _conversation(raw: Any, index: int, where: str) -> Conversation:
    if not isinstance(raw, dict) or not isinstance(raw.get("conversation"), dict):
        raise DataError(f"{where}: expected an object with a 'conversation' object")
    conv = raw["conversation"]
    session_id = str(raw.get("sample_id") or f"conv-{index}")
    first = conv.get("speaker_a")
    turns = [turn for n in _session_numbers(conv) for turn in _turns(conv, n, first, where)]
    return Conversation(session_id, turns, [])


def _session_numbers(conv: dict[str, Any]) -> list[int]:
    numbers = (re.fullmatch(r"session_(\d+)", key) for key in conv)
    return sorted(int(m[1]) for m in numbers if m)


def _turns(conv: dict[str, Any], n: int, first: Any, where: str) -> Iterator[Turn]:
    when = parse_date(conv.get(f"session_{n}_date_time"), f"{where} session_{n}_date_time")
    for i, raw in enumerate(_list(conv[f"session_{n}"], f"{where} session_{n}")):
        if not isinstance(raw, dict) or not all(
                isinstance(raw.get(k), str) for k in ("speaker", "dia_id", "text")):
            raise DataError(f"{where} session_{n} turn {i}: needs speaker, dia_id and text")
        content = f"{raw['speaker']}: {raw['text']}"
        if isinstance(raw.get("blip_caption"), str) and raw["blip_caption"].strip():
            content += f" [image: {raw['blip_caption'].strip()}]"
        role = "user" if raw["speaker"] == first else "assistant"
        yield Turn(raw["dia_id"], role, content, when + timedelta(microseconds=i), n)


def parse_date(value: Any, where: str) -> datetime:
    """``"1:56 pm on 8 May, 2023"`` -> an aware datetime (the file gives no zone: UTC)."""
    if isinstance(value, str):
        text = " ".join(value.split())
        for fmt in DATE_FORMATS:
            try:
                return datetime.strptime(text, fmt).replace(tzinfo=UTC)
            except ValueError:
                continue
    raise DataError(f"{where}: cannot read the date {value!r} (expected e.g. "
                    "'1:56 pm on 8 May, 2023')")


def _question(qa: Any, where: str, turn_ids: set[str], wanted: set[int],
              report: EvidenceReport) -> Question | None:
    """The question, if of a wanted category; None otherwise."""
    if not isinstance(qa, dict) or not isinstance(qa.get("question"), str):
        raise DataError(f"{where}: each qa entry needs a question string")
    category = qa.get("category")
    if category not in wanted or isinstance(category, bool):
        return None
    evidence = normalise_evidence(_list(qa.get("evidence", []), f"{where} evidence"),
                                  turn_ids, report)
    return Question(qa["question"], int(category), evidence)


def normalise_evidence(raw: list[Any], turn_ids: set[str],
                       report: EvidenceReport) -> tuple[str, ...]:
    """The distinct turn ids ``raw`` names, in order (rules in the module docstring)."""
    found: list[str] = []
    for value in raw:
        report.total += 1
        pieces = [p for p in re.split(r"[;,\s]+", str(value)) if p] or [repr(value)]
        for piece in pieces:
            match = _EVIDENCE.fullmatch(piece)
            turn_id = f"D{match[1]}:{match[2]}" if match else None
            if turn_id is None or turn_id not in turn_ids:
                report.dropped.append(piece)
                continue
            if turn_id in found:
                continue
            if turn_id != value:
                report.rewritten.append(f"{value!r} -> {turn_id}")
            found.append(turn_id)
    return tuple(found)


def load_into(client: MemoryClient, conversations: Iterable[Conversation],
              layout: str = "session") -> dict[str, str]:
    """Append every turn through ``client`` in ``layout`` and wait until all are committed.

    Returns ``"<conversation id>/<dia_id>"`` -> message id.
    """
    if layout not in LAYOUTS:
        raise DataError(f"layout must be one of {', '.join(LAYOUTS)}, got {layout!r}")
    ids: dict[str, str] = {}
    with client.batched():
        for conversation in conversations:
            user = {"user": conversation.session_id, "haystack": HAYSTACK_USER}.get(layout)
            for turn in conversation.turns:
                key = f"{conversation.session_id}/{turn.dia_id}"
                ids[key] = client.append(conversation.memq_session(turn, layout), turn.role,
                                         turn.content, created_at=turn.created_at,
                                         user_id=user)
    client.flush(timeout=600)
    return ids


def _list(value: Any, where: str) -> list[Any]:
    if not isinstance(value, list):
        raise DataError(f"{where}: expected a list")
    return value


def category_counts(conversations: Iterable[Conversation]) -> Counter[int]:
    return Counter(q.category for c in conversations for q in c.questions)
