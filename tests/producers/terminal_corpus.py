"""The terminal matcher's corpus (terminal_corpus.toml), as cases."""

from __future__ import annotations

import tomllib
from dataclasses import dataclass
from pathlib import Path

CORPUS = Path(__file__).with_name("terminal_corpus.toml")
VERDICTS = ("allow", "deny", "refuse")


@dataclass(frozen=True)
class Case:
    group: str
    verdict: str
    """"allow", "deny" (a real bypass attempt) or "refuse" (refused for caution)."""
    command: str

    @property
    def id(self) -> str:
        shown = repr(self.command)
        return f"{self.group}:{shown if len(shown) <= 60 else shown[:57] + '...'}"


def load() -> tuple[tuple[str, ...], list[Case]]:
    """The approved prefixes and every case, in file order."""
    data = tomllib.loads(CORPUS.read_text(encoding="utf-8"))
    prefixes = tuple(data.pop("prefixes"))
    cases = [Case(group, verdict, command)
             for group, table in data.items()
             for verdict in VERDICTS
             for command in table.get(verdict, ())]
    return prefixes, cases


PREFIXES, CASES = load()


def of(verdict: str) -> list[Case]:
    return [case for case in CASES if case.verdict == verdict]
