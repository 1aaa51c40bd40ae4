"""The ``memq`` command line: one module per command group, one entry point.

Exit codes: 0 success, 2 usage error (argparse's, or a value memq refuses: a
:class:`~memq.errors.ValidationError`), 1 any other error, with a one-line message on
stderr. A :class:`~memq.errors.MemqError` never shows a traceback: tracebacks are for bugs.
Every ``--json`` prints one JSON object (see :func:`memq.cli.common.print_json`).
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence

from memq import __version__
from memq.cli import (
    acl,
    admin,
    consolidate,
    context,
    dashboard,
    demo,
    embeddings,
    facts,
    forget,
    keys,
    mcp,
    metrics,
    model,
    portable,
    prefixes,
    replication,
    serve,
    sessions,
    status,
    tasks,
    up,
    webhooks,
    worker,
    writer,
)
from memq.errors import MemqError

GROUPS = (
    writer, worker, admin, model, context, sessions, forget, embeddings, consolidate, tasks,
    facts, up, status, dashboard, metrics, demo, acl, prefixes, keys, replication, serve, mcp,
    portable, webhooks,
)
"""Each module has ``register(subparsers)`` that adds its commands with a ``func``."""


SECTIONS: tuple[tuple[str, tuple[str, ...]], ...] = (
    ("start here", ("up", "status", "demo", "context", "sessions")),
    ("the person's", ("facts", "tasks", "allow", "revoke", "allowed", "forget", "rejected",
                      "acl", "keys", "audit", "export", "import", "webhooks")),
    ("operate", ("writer", "worker", "scheduler", "serve", "mcp", "dashboard", "metrics",
                 "replicate")),
    ("maintenance", ("migrate", "rebuild", "backup", "restore", "fetch-model",
                     "backfill-embeddings", "consolidate")),
)
"""How ``memq --help`` groups the commands (a test checks every command is in one)."""


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="memq", description="memq: the state and memory service for AI agents.",
        usage="memq [-h] [--version] COMMAND ...",
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--version", action="version", version=f"memq {__version__}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", required=True,
                                help=argparse.SUPPRESS)
    for group in GROUPS:
        group.register(sub)
    parser.epilog = _sections(sub)
    return parser


def _sections(sub: argparse._SubParsersAction) -> str:  # type: ignore[type-arg]
    """The commands by section, each with its one-line help; `memq COMMAND -h` for more."""
    helps = {action.dest: action.help or "" for action in sub._choices_actions}
    lines = []
    for title, names in SECTIONS:
        lines.append(f"{title}:")
        lines += [f"  {name:<21}{helps.get(name, '')}" for name in names]
    lines.append("\n`memq COMMAND -h` says more about one command.")
    return "\n".join(lines)


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
