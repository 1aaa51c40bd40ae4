"""``memq demo``: a few simulated agents use a running stack, and one ``get_context`` shows
all three retrieval branches.

Three agents (one thread and one ``MemoryClient`` each, as separate processes would have)
hold their conversations at once; the support agent's user mentions an important allergy
early on, and the deployment day of a service a little later, then talks about something
else for a dozen turns. The demo sets facts, schedules a task, waits for the embedding
workers, and asks for the context of a question about the deployment: the recent turns
come from recency, the allergy from importance, and the deployment turn from semantic
similarity alone.
"""

from __future__ import annotations

import argparse
import threading
import time
from collections.abc import Sequence
from dataclasses import asdict, is_dataclass
from pathlib import Path
from typing import Any

from memq.cli.common import add_store_options, load_config, positive_seconds
from memq.clock import uuid7
from memq.config import Config
from memq.errors import MemqError, ValidationError

QUERY = "When is the billing service deployed to Kubernetes?"

Turn = tuple[str, str, float | None]
"""(role, content, importance or None for the role's default)."""

SUPPORT: tuple[Turn, ...] = (
    ("user", "Hi, I'm Dana. Heads-up: I am severely allergic to peanuts, so never suggest "
             "anything with peanuts in it.", 0.95),
    ("assistant", "Noted, Dana: no peanuts, ever.", None),
    ("user", "For context at work: the billing service is deployed to Kubernetes every "
             "Tuesday with a blue-green rollout.", None),
    ("assistant", "Thanks, I'll remember the Tuesday rollouts.", None),
    ("user", "What should I cook for the dinner party on Saturday?", None),
    ("assistant", "A mushroom risotto works well for eight people.", None),
    ("user", "Good idea. How long does the risotto take?", None),
    ("assistant", "About forty minutes, stirring most of the time.", None),
    ("user", "Can I prepare anything the day before?", None),
    ("assistant", "Yes: make the stock and chop the mushrooms ahead.", None),
    ("user", "The weather looks fine for Saturday evening.", None),
    ("assistant", "Then you could eat outside on the terrace.", None),
    ("user", "Should I bring blankets?", None),
    ("assistant", "A few, it gets cool after sunset.", None),
    ("user", "What wine goes with the risotto?", None),
    ("assistant", "A dry white such as a Soave.", None),
)

RESEARCH: tuple[Turn, ...] = (
    ("system", "You summarise papers for the team.", None),
    ("user", "Summarise the paper on retrieval-augmented generation.", None),
    ("assistant", "It pairs a retriever with a generator and trains them end to end.", None),
    ("user", "Which benchmark did they report?", None),
    ("assistant", "Open-domain question answering, including Natural Questions.", None),
)

OPS: tuple[Turn, ...] = (
    ("user", "Is the disk on the build machine filling up?", None),
    ("assistant", "Let me check the disk usage.", None),
    ("tool", "/dev/sda1  81% used  (38G free)", None),
    ("assistant", "81% used, 38 GB free: fine for now.", None),
)


DEMO_USER = "demo-dana"
"""Whose conversations and facts the demo writes: a user of its own, so that no other user
of the database sees the demo's allergy as a global fact."""


def register(sub: Any) -> None:
    parser = sub.add_parser(
        "demo", help="simulated agents use the running stack; prints one get_context result")
    add_store_options(parser)
    parser.add_argument("--timeout", type=positive_seconds, default=120.0,
                        help="seconds to wait for the writer and for embeddings (default 120)")
    parser.add_argument("--yes", action="store_true",
                        help="add the demo's sessions, facts and task to a database that "
                             "already holds data")
    parser.set_defaults(func=run_demo)


def run_demo(args: argparse.Namespace) -> int:
    from memq import MemoryClient  # the CLI alone may import the roles

    config = load_config(args)
    if not args.yes:
        _refuse_a_database_in_use(config.db_path)
    tag = uuid7()[-6:]  # a fresh set of sessions on every run
    sessions = {name: f"demo-{tag}-{name}" for name in ("support", "research", "ops")}
    _say(f"three agents talk at once (sessions {', '.join(sessions.values())})")
    _converse(config, sessions, args.timeout)
    with MemoryClient(config=config) as client:
        _remember(client)
        client.flush(args.timeout)
        _wait_for_embeddings(client, list(sessions.values()), args.timeout)
        _show_context(client, sessions["support"])
    return 0


def _refuse_a_database_in_use(db_path: str) -> None:
    """The demo writes real facts (two of them the user's) and a weekly task: not into
    someone's data unless they say so."""
    from memq.store.rebuild import event_count

    events = event_count(db_path) if Path(db_path).exists() else 0
    if events:
        raise ValidationError(
            f"{db_path} already holds {events} events; the demo would add three demo "
            "conversations, three facts (two as the user's) and a weekly task to it. Pass "
            "--yes to add them, or give the demo a stack of its own: `memq up --demo` in an "
            "empty directory, with no MEMQ_REDIS_URL set")


def _say(text: str) -> None:
    print(text, flush=True)


# -- the agents --------------------------------------------------------------------------


def _converse(config: Config, sessions: dict[str, str], timeout: float) -> None:
    scripts = {"support": SUPPORT, "research": RESEARCH, "ops": OPS}
    errors: list[BaseException] = []
    threads = [
        threading.Thread(target=_agent, args=(config, sessions[name], script, timeout, errors))
        for name, script in scripts.items()
    ]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    if errors:
        raise errors[0]
    for name, script in scripts.items():
        _say(f"  {name}: {len(script)} turns committed")


def _agent(config: Config, session: str, script: Sequence[Turn], timeout: float,
           errors: list[BaseException]) -> None:
    from memq import MemoryClient

    try:
        with MemoryClient(config=config) as client:
            for role, content, importance in script:
                client.append(session, role, content, importance=importance,
                              tool_name="shell" if role == "tool" else None,
                              user_id=DEMO_USER)
                time.sleep(0.01)  # agents think between turns; the others interleave
            client.flush(timeout)
    except BaseException as exc:  # reported by the main thread
        errors.append(exc)


# -- facts and tasks ---------------------------------------------------------------------


def _remember(client: Any) -> None:
    _say("facts and a scheduled task")
    client.set_fact("user", "name", "Dana", source="user", user_id=DEMO_USER)
    client.set_fact("user", "allergy", "peanuts (severe)", source="user", user_id=DEMO_USER)
    client.set_fact("project", "billing_deploys", "Tuesdays, blue-green on Kubernetes")
    task_id = client.schedule_task("billing-rollout-check", "every Tuesday at 9am",
                                   "Check that the billing blue-green rollout finished.")
    _say(f"  scheduled task {task_id}: billing-rollout-check, every Tuesday at 9am")
    client.flush()
    for fact in client.facts(user_id=DEMO_USER):  # the global ones and the demo user's
        _say(f"  fact: {_describe(fact)}")
    for task in client.tasks():
        _say(f"  task: {_describe(task)}")


def _describe(item: Any) -> str:
    fields = asdict(item) if is_dataclass(item) and not isinstance(item, type) else item
    if isinstance(fields, dict):
        return ", ".join(f"{k}={v}" for k, v in fields.items() if v not in (None, ""))
    return str(fields)


# -- embeddings and the context ------------------------------------------------------------


def _wait_for_embeddings(client: Any, sessions: list[str], timeout: float) -> bool:
    from memq.store.read.messages import count_unembedded

    """Poll until the embed workers have embedded every demo message; False on timeout."""
    _say("waiting for the embed workers")
    deadline = time.monotonic() + timeout
    while True:
        with client.readers.connection() as conn:
            left = count_unembedded(conn, sessions)
        if left == 0:
            _say("  every message is embedded")
            return True
        if time.monotonic() >= deadline:
            _say(f"  {left} messages still without an embedding after {timeout:g} s: is "
                 "`memq worker embed` running? The semantic branch needs them.")
            return False
        time.sleep(0.2)


def _show_context(client: Any, session: str) -> None:
    _say(f"\nget_context({session!r}, query={QUERY!r})")
    try:
        items = client.get_context(session, query=QUERY)
    except MemqError as exc:
        _say(f"  get_context failed: {exc}")
        return
    _say(f"  {'branches':<28}{'importance':>10}{'similarity':>11}  {'role':<10}content")
    seen: set[str] = set()
    for item in items:
        seen.update(item.branches)
        similarity = "" if item.similarity is None else f"{item.similarity:.2f}"
        content = item.content if len(item.content) <= 60 else item.content[:57] + "..."
        _say(f"  {', '.join(item.branches):<28}{item.importance:>10.2f}{similarity:>11}  "
             f"{item.role:<10}{content}")
    wanted = ("recency", "importance", "semantic")
    missing = [b for b in wanted if b not in seen]
    _say("  every branch contributed" if not missing
         else f"  no item from: {', '.join(missing)}")
