"""The terminal matcher's speed against its predecessor's, on the same commands.

The matcher runs on every command an agent wants to run, so it must stay cheap. Two
workloads, each timed with both matchers in the same round, rounds alternating which one
goes first:

- ``corpus``  every command of tests/producers/terminal_corpus.toml (attacks, cautious
              refusals and allowed commands alike) with the corpus's 13 prefixes;
- ``agent``   commands shaped like an agent's, all allowed by both matchers, with 40
              approved prefixes: mostly one short command, some ``&&`` / ``|`` chains,
              and a few with a long multi-line commit message (1-4 KB), as agents write.

The predecessor is bench/terminal_baseline.py, the matcher before it understood comments.
It normalised every approved prefix on every call; the new one caches that, so the bench
also times the new matcher with its cache emptied before each call (``uncached``): the
cost of reading the command alone. Figures are microseconds per command (the median
round), and the ratios to the previous matcher per round (median and range); below 1 is
faster.

    python bench/terminal.py [--rounds 5] [--repeat 20]
"""

from __future__ import annotations

import argparse
import random
import statistics
import sys
import time
import tomllib
from collections.abc import Callable, Iterable, Sequence
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench import terminal_baseline
from memq.producers import terminal

CORPUS = Path(__file__).resolve().parent.parent / "tests" / "producers" / "terminal_corpus.toml"
Matcher = Callable[[str, Iterable[str]], bool]


def _uncached(command: str, prefixes: Iterable[str]) -> bool:
    terminal._prefix_words.cache_clear()
    return terminal.is_command_allowed(command, prefixes)


MATCHERS: dict[str, Matcher] = {
    "new": terminal.is_command_allowed,
    "uncached": _uncached,
    "previous": terminal_baseline.is_command_allowed,
}
COMPARED = ("new", "uncached")

AGENT_PREFIXES = (
    "ls", "cat", "head", "tail", "wc", "grep", "rg", "find", "sort", "uniq", "diff", "echo",
    "pwd", "tree", "file", "stat", "du -sh", "git status", "git diff", "git log", "git show",
    "git branch", "git add", "git commit", "git stash list", "git rev-parse", "npm run test",
    "npm run lint", "npm ls", "python3 -m pytest", "python3 -m mypy", "ruff check",
    "cargo test", "cargo check", "go test", "go vet", "make test", "make lint", "jq", "node -v",
)
SHORT = (
    "ls -la", "git status -s", "git diff --stat", "git log --oneline -20", "cat README.md",
    "grep -rn 'TODO' src", "rg -n \"fn main\" --type rust", "find . -name '*.py' -newer setup.py",
    "python3 -m pytest -q tests/test_api.py -x", "ruff check .", "git show HEAD~1 --stat",
    "head -50 src/app/main.py", "wc -l src/*.py", "npm run test -- --watch=false",
    "git diff HEAD~3 -- src/server.ts", "jq '.dependencies' package.json", "tree -L 2 src",
)
WORDS = ("fix", "handle", "empty", "input", "in", "the", "parser", "retry", "when", "redis",
         "drops", "connection", "add", "tests", "for", "edge", "cases", "and", "docs")


def agent_commands(count: int, seed: int = 7) -> list[str]:
    rng = random.Random(seed)
    commands = []
    for _ in range(count):
        shape = rng.random()
        if shape < 0.7:
            commands.append(rng.choice(SHORT))
        elif shape < 0.95:
            joiner = rng.choice((" && ", " | ", "; ", "\n"))
            commands.append(joiner.join(rng.sample(SHORT, rng.randint(2, 5))))
        else:
            commands.append(f'git add -A && git commit -m "{_message(rng)}"')
    return commands


def _message(rng: random.Random) -> str:
    lines = [" ".join(rng.choices(WORDS, k=rng.randint(4, 12))) for _ in range(rng.randint(20, 60))]
    return "\n".join(lines)


def corpus() -> tuple[list[str], list[str]]:
    data = tomllib.loads(CORPUS.read_text(encoding="utf-8"))
    prefixes = data.pop("prefixes")
    commands = [c for table in data.values() for v in ("allow", "deny", "refuse")
                for c in table.get(v, ())]
    return prefixes, commands


def time_per_command(match: Matcher, commands: Sequence[str], prefixes: Sequence[str],
                     repeat: int) -> float:
    """Microseconds per command, the best of ``repeat`` passes."""
    best = float("inf")
    for _ in range(repeat):
        started = time.perf_counter()
        for command in commands:
            match(command, prefixes)
        best = min(best, time.perf_counter() - started)
    return best / len(commands) * 1e6


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--repeat", type=int, default=20, help="passes per round (best kept)")
    parser.add_argument("--agent-commands", type=int, default=2000)
    args = parser.parse_args()
    corpus_prefixes, corpus_commands = corpus()
    agent = agent_commands(args.agent_commands)
    for command in agent:  # the comparison is only fair on commands both allow
        assert all(m(command, AGENT_PREFIXES) for m in MATCHERS.values()), command
    workloads = {"corpus": (corpus_commands, corpus_prefixes), "agent": (agent, AGENT_PREFIXES)}
    print(f"terminal matcher: corpus {len(corpus_commands)} commands "
          f"({len(corpus_prefixes)} prefixes), agent {len(agent)} commands "
          f"({len(AGENT_PREFIXES)} prefixes, {sum(map(len, agent)) // len(agent)} chars "
          f"on average)")
    figures = {(name, m): list[float]() for name in workloads for m in MATCHERS}
    for round_number in range(1, args.rounds + 1):
        order = list(MATCHERS) if round_number % 2 else list(reversed(MATCHERS))
        shown = []
        for name, (commands, prefixes) in workloads.items():
            for m in order:
                figures[(name, m)].append(
                    time_per_command(MATCHERS[m], commands, prefixes, args.repeat))
            shown.append(f"{name} " + ", ".join(
                f"{m} {figures[(name, m)][-1]:.1f}" for m in MATCHERS))
        print(f"round {round_number} (us/command): " + "; ".join(shown))
    for name in workloads:
        print(summary(name, figures, args.rounds))


def summary(name: str, figures: dict[tuple[str, str], list[float]], rounds: int) -> str:
    medians = ", ".join(f"{m} {statistics.median(figures[(name, m)]):.1f}" for m in MATCHERS)
    ratios = []
    for m in COMPARED:
        per_round = [a / b for a, b in zip(figures[(name, m)], figures[(name, "previous")],
                                           strict=True)]
        ratios.append(f"{m} / previous {statistics.median(per_round):.2f} "
                      f"({min(per_round):.2f}-{max(per_round):.2f})")
    return f"{name}: {medians} us/command; median of {rounds}: " + ", ".join(ratios)


if __name__ == "__main__":
    main()
