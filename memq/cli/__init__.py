"""The ``memq`` command line: one module per command group, one entry point.

Exit codes: 0 success, 2 usage error (argparse), 1 any other error with a one-line message
on stderr. A :class:`~memq.errors.MemqError` never shows a traceback: tracebacks are for bugs.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence

from memq.cli import (
    admin,
    consolidate,
    context,
    dashboard,
    demo,
    embeddings,
    facts,
    metrics,
    model,
    status,
    tasks,
    up,
    worker,
    writer,
)
from memq.errors import MemqError

GROUPS = (
    writer, worker, admin, model, context, embeddings, consolidate, tasks, facts, up, status,
    dashboard, metrics, demo,
)
"""Each module has ``register(subparsers)`` that adds its commands with a ``func``."""


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="memq", description="memq: the state and memory service for AI agents."
    )
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", required=True)
    for group in GROUPS:
        group.register(sub)
    return parser


def command_parsers() -> dict[str, argparse.ArgumentParser]:
    """Each top-level command and its parser (for ``memq up`` and the documentation test)."""
    for action in build_parser()._actions:  # argparse keeps its subcommands only here
        if isinstance(action, argparse._SubParsersAction):
            return dict(action.choices)
    return {}


def command_names() -> set[str]:
    return set(command_parsers())


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    try:
        return int(args.func(args) or 0)
    except MemqError as exc:
        print(f"memq: error: {exc}", file=sys.stderr)
        return exc.exit_code
    except KeyboardInterrupt:
        return 130


if __name__ == "__main__":
    sys.exit(main())
