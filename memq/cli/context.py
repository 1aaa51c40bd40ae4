"""``memq context SESSION [--query TEXT] [--profile NAME] [--json]``: get_context, explained."""

from __future__ import annotations

import argparse
import dataclasses
from typing import TYPE_CHECKING, Any

import orjson

from memq.cli.common import add_store_options, load_config

if TYPE_CHECKING:
    from producers.context import ContextItem

PREVIEW_CHARS = 100
"""Content shown per item in the text output; ``--json`` carries it whole."""


def register(sub: Any) -> None:
    parser = sub.add_parser(
        "context", help="show a session's context: each message, its branches and scores"
    )
    parser.add_argument("session", metavar="SESSION", help="session id")
    parser.add_argument("--query", help="text to search for (by meaning, and by its words "
                                        "in the recall profile)")
    parser.add_argument("--json", action="store_true", help="one JSON object per message")
    parser.add_argument("--profile", help="retrieval profile (default: [retrieval] profile)")
    parser.add_argument("--model-dir", help="embedding model files (default: [embed] model_dir)")
    add_store_options(parser)
    parser.set_defaults(func=show_context)


def show_context(args: argparse.Namespace) -> int:
    from producers import MemoryClient
    from store.rebuild import ensure_exists

    config = load_config(args)
    if args.profile:
        config = config.replace(
            retrieval=dataclasses.replace(config.retrieval, profile=args.profile))
    # The library treats a missing file as "no history yet"; here it is a wrong --db.
    ensure_exists(config.db_path)
    with MemoryClient(config=config) as client:
        items = client.get_context(args.session, query=args.query)
    for item in items:
        if args.json:
            print(orjson.dumps(item.to_dict()).decode())
        else:
            print(_line(item))
    if not items and not args.json:
        print(f"no messages in session {args.session!r}")
    return 0


def _line(item: ContextItem) -> str:
    scores = " ".join(f"{branch}={value:.3g}" for branch, value in item.scores.items())
    similarity = "" if item.similarity is None else f" sim={item.similarity:.3f}"
    if item.neighbour_of is not None:
        similarity += f" after={item.neighbour_of}"
    content = " ".join(item.content.split())
    if len(content) > PREVIEW_CHARS:
        content = content[: PREVIEW_CHARS - 1] + "…"
    return (f"{item.created_at}  {item.role:<9} [{','.join(item.branches)}] {scores}"
            f"{similarity}  {item.id}\n    {content}")
