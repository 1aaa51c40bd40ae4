"""``memq context SESSION [--query TEXT] [--scope S] [--profile NAME] [--json]``:
get_context, explained."""

from __future__ import annotations

import argparse
import dataclasses
from typing import TYPE_CHECKING, Any

from memq.cli.common import add_store_options, load_config, print_json
from memq.printable import printable

if TYPE_CHECKING:
    from memq.producers.context import ContextItem

PREVIEW_CHARS = 100
"""Content shown per item in the text output; ``--json`` carries it whole."""


def register(sub: Any) -> None:
    parser = sub.add_parser(
        "context", help="show a session's context: each message, its branches and scores"
    )
    parser.add_argument("session", metavar="SESSION", help="session id")
    parser.add_argument("--query", help="text to search for (by meaning, and by its words "
                                        "in the recall profile)")
    parser.add_argument("--scope", choices=("session", "user", "agent"), default="session",
                        help="search the session (default), every session of its user, or "
                             "of its user's agent")
    parser.add_argument("--json", action="store_true",
                        help="one JSON object: the session, query, profile and items")
    parser.add_argument("--profile", type=profile_name,
                        help="retrieval profile (default: [retrieval] profile)")
    parser.add_argument("--model-dir", help="embedding model files (default: [embed] model_dir)")
    add_store_options(parser)
    parser.set_defaults(func=show_context)


def profile_name(text: str) -> str:
    """An argparse type: a retrieval profile this build has (a usage error otherwise)."""
    from memq.producers.ranking.profiles import PROFILES  # only when the option is given

    if text not in PROFILES:
        raise argparse.ArgumentTypeError(
            f"unknown profile {text!r} (known: {', '.join(sorted(PROFILES))})")
    return text


def show_context(args: argparse.Namespace) -> int:
    from memq import MemoryClient
    from memq.store.rebuild import ensure_exists

    config = load_config(args)
    if args.profile:
        config = config.replace(
            retrieval=dataclasses.replace(config.retrieval, profile=args.profile))
    # The library treats a missing file as "no history yet"; here it is a wrong --db.
    ensure_exists(config.db_path)
    with MemoryClient(config=config) as client:
        items = client.get_context(args.session, query=args.query, scope=args.scope)
    if args.json:
        print_json({"session_id": args.session, "query": args.query, "scope": args.scope,
                    "profile": config.retrieval.profile,
                    "items": [item.to_dict() for item in items]})
        return 0
    for item in items:
        print(_line(item))
    if not items:
        print(f"no messages in session {args.session!r}")
    if any(item.semantic_partial for item in items) and not args.json:
        print("semantic search was partial: some turns have no vector yet (embedding is "
              "behind; `memq status`); those were searched by their words")
    return 0


def _line(item: ContextItem) -> str:
    """Two lines for people. Stored text is the agents' own, so everything shown is
    :func:`~memq.printable.printable`: an escape sequence in a message is shown as
    ``\x1b[2J``, not run by the terminal (``--json`` carries the text exactly)."""
    scores = " ".join(f"{branch}={value:.3g}" for branch, value in item.scores.items())
    similarity = "" if item.similarity is None else f" sim={item.similarity:.3f}"
    if item.neighbour_of is not None:
        similarity += f" after={item.neighbour_of}"
    content = " ".join(item.content.split())
    if len(content) > PREVIEW_CHARS:
        content = content[: PREVIEW_CHARS - 1] + "…"
    head = (f"{item.created_at}  {item.role:<9} [{','.join(item.branches)}] {scores}"
            f"{similarity}  {item.session_id}/{item.id}")
    return f"{printable(head, one_line=True)}\n    {printable(content, one_line=True)}"
