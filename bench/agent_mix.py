"""A seeded stream of what an agent platform records: turns, one-word replies, tool output.

``agent_mix(n, seed)`` returns ``n`` texts in arrival order: 70% conversation turns, 10%
one-word replies, 20% tool outputs of 20-60 log lines (application logs, test runs,
type-checker output, directory listings, stack traces). Conversation turns are the
LoCoMo development turns, in order, when the file is there (``../shared/data/locomo-dev.json``
by default), and generated chat lines otherwise; tool output is always generated. The same
arguments give the same stream.

Every tool output and conversation turn is distinct (a LoCoMo turn is only reused once
all 1,451 have been), so deduplication gains only from what repeats in a real stream:
the short replies.
"""

from __future__ import annotations

import json
import random
from collections.abc import Callable, Iterator
from pathlib import Path

LOCOMO = Path(__file__).resolve().parent.parent.parent / "shared" / "data" / "locomo-dev.json"
"""The LoCoMo development conversations, beside the repository."""

SHARES = (("turn", 0.7), ("reply", 0.1), ("tool", 0.2))
"""Kinds of text and their share of the stream."""

TOOL_LINES = (20, 60)
"""A tool output has this many lines, inclusive."""

REPLIES = ("ok", "yes", "no", "thanks", "done", "sure", "great", "continue", "yep",
           "perfect", "agreed", "stop", "proceed", "right", "Thanks!", "OK.", "nope")

_MODULES = ("api.handlers.session", "api.routes.users", "worker.embed", "db.pool",
            "billing.invoices", "auth.tokens", "scheduler.cron", "cache.redis",
            "search.index", "payments.stripe", "mailer.outbox", "storage.s3")
_EVENTS = ("request handled", "cache miss", "retrying after timeout", "connection reset",
           "slow query", "token refreshed", "job finished", "batch committed",
           "upstream returned 502", "payload rejected: missing field 'user_id'",
           "lock acquired", "rate limit reached", "checkpoint written", "queue drained")
_PATHS = ("src/app/db.py", "src/app/routes.py", "src/app/models/user.py",
          "src/billing/invoice.py", "src/auth/tokens.py", "lib/cache.py", "tests/conftest.py",
          "src/search/ranking.py", "src/mailer/templates.py", "src/payments/refunds.py")
_WORDS = ("user", "invoice", "session", "token", "refund", "cache", "order", "payment",
          "report", "schedule", "upload", "profile", "search", "export", "webhook")
_CHAT = ("Could you check whether the {w} job #{n} finished and what it printed?",
         "The {w} tests keep failing on CI since build {n} but pass locally, any idea why?",
         "I think we should move the {w} logic into its own module before the {n} release.",
         "Please summarise what changed in the {w} service since deploy {n}.",
         "Yesterday's {w} export had {n} rows, today only {m}: can you find out why?",
         "Let's retry the {w} migration with a smaller batch, say {n} at a time.")
"""Chat lines when the LoCoMo file is absent; the numbers keep nearly all of them distinct."""


def agent_mix(count: int, seed: int = 17, locomo: Path = LOCOMO) -> list[str]:
    """``count`` texts in arrival order (see the module docstring)."""
    rng = random.Random(seed)
    turns = _turns(rng, locomo)
    makers: dict[str, Callable[[], str]] = {
        "turn": lambda: next(turns),
        "reply": lambda: rng.choice(REPLIES),
        "tool": lambda: tool_output(rng),
    }
    kinds = [kind for kind, _ in SHARES]
    weights = [share for _, share in SHARES]
    return [makers[rng.choices(kinds, weights)[0]]() for _ in range(count)]


def chat_turns(count: int, seed: int = 17, locomo: Path = LOCOMO) -> list[str]:
    """``count`` conversation turns only (the same turns :func:`agent_mix` draws from)."""
    turns = _turns(random.Random(seed), locomo)
    return [next(turns) for _ in range(count)]


def tool_output(rng: random.Random, lines: int | None = None) -> str:
    """One tool output of ``lines`` lines (20-60 when not given), of a random kind."""
    if lines is None:
        lines = rng.randint(*TOOL_LINES)
    kind = rng.choice((_app_log, _test_run, _type_check, _listing, _traceback))
    return "\n".join(kind(rng, lines))


def uses_locomo(locomo: Path = LOCOMO) -> bool:
    return locomo.is_file()


def _turns(rng: random.Random, locomo: Path) -> Iterator[str]:
    texts = _locomo_turns(locomo)
    while True:
        if texts:
            yield from texts
        else:
            yield _chat(rng)


def _locomo_turns(locomo: Path) -> list[str]:
    if not locomo.is_file():
        return []
    turns: list[str] = []
    for conversation in json.loads(locomo.read_text()):
        for key, session in conversation["conversation"].items():
            if key.startswith("session_") and isinstance(session, list):
                turns.extend(f"{t['speaker']}: {t['text']}" for t in session if t.get("text"))
    return turns


def _chat(rng: random.Random) -> str:
    return rng.choice(_CHAT).format(w=rng.choice(_WORDS), n=rng.randint(10, 5000),
                                    m=rng.randint(10, 5000))


def _stamp(rng: random.Random, second: int) -> str:
    return (f"2025-03-{rng.randint(1, 28):02d}T{second // 3600 % 24:02d}:"
            f"{second // 60 % 60:02d}:{second % 60:02d}.{rng.randint(0, 999):03d}Z")


def _app_log(rng: random.Random, lines: int) -> list[str]:
    start = rng.randint(0, 80_000)
    out = []
    for i in range(lines):
        level = rng.choices(("INFO", "DEBUG", "WARN", "ERROR"), (70, 15, 10, 5))[0]
        out.append(f"{_stamp(rng, start + i * rng.randint(0, 9))} {level:<5} "
                   f"[{rng.choice(_MODULES)}] {rng.choice(_EVENTS)} "
                   f"request_id={rng.getrandbits(48):012x} "
                   f"duration_ms={rng.uniform(0.3, 900):.1f} "
                   f"{rng.choice(_WORDS)}_id={rng.randint(1, 99999)}")
    return out


def _test_run(rng: random.Random, lines: int) -> list[str]:
    out = ["============================= test session starts ==============================",
           f"platform linux -- Python 3.11.{rng.randint(2, 9)}, pytest-8.{rng.randint(0, 3)}.0",
           f"collected {lines * rng.randint(3, 9)} items"]
    failed = 0
    for _ in range(lines - 4):
        word = rng.choice(_WORDS)
        outcome = rng.choices(("PASSED", "FAILED", "SKIPPED"), (85, 10, 5))[0]
        failed += outcome == "FAILED"
        out.append(f"tests/test_{word}s.py::test_{word}_{rng.choice(_WORDS)}_"
                   f"{rng.choice(('created', 'rejected', 'expires', 'retries'))} {outcome} "
                   f"[{rng.randint(1, 99):3d}%]")
    out.append(f"========= {failed} failed, {lines - 4 - failed} passed in "
               f"{rng.uniform(1, 90):.2f}s =========")
    return out


def _type_check(rng: random.Random, lines: int) -> list[str]:
    out = []
    for _ in range(lines - 1):
        out.append(f"{rng.choice(_PATHS)}:{rng.randint(1, 600)}: error: Incompatible types in "
                   f"assignment (expression has type \"{rng.choice(('str', 'int', 'None'))}\", "
                   f"variable has type \"{rng.choice(('float', 'bytes', 'list[str]'))}\")  "
                   "[assignment]")
    out.append(f"Found {lines - 1} errors in {rng.randint(1, 9)} files "
               f"(checked {rng.randint(40, 400)} source files)")
    return out


def _listing(rng: random.Random, lines: int) -> list[str]:
    out = [f"total {rng.randint(100, 90_000)}"]
    for _ in range(lines - 1):
        mode = rng.choice(("-rw-r--r--", "drwxr-xr-x", "-rwxr-xr-x"))
        name = f"{rng.choice(_WORDS)}_{rng.randint(1, 999)}.{rng.choice(('py', 'json', 'log'))}"
        out.append(f"{mode} 1 agent staff {rng.randint(0, 10**7):>9} "
                   f"Mar {rng.randint(1, 28):2d} {rng.randint(0, 23):02d}:{rng.randint(0, 59):02d} "
                   f"{name}")
    return out


def _traceback(rng: random.Random, lines: int) -> list[str]:
    out = ["Traceback (most recent call last):"]
    while len(out) < lines - 1:
        path = rng.choice(_PATHS)
        out.append(f'  File "/srv/app/{path}", line {rng.randint(1, 900)}, in '
                   f"{rng.choice(('handle', 'commit', 'load', 'apply', '_run', 'send'))}_"
                   f"{rng.choice(_WORDS)}")
        out.append(f"    result = self.{rng.choice(_WORDS)}s.get({rng.choice(_WORDS)}_id)")
    out.append(f"KeyError: '{rng.choice(_WORDS)}_id'")
    return out[:lines]
