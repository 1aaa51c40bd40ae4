"""The ``memq`` command line: one module per command group, one entry point.

Exit codes: 0 success, 2 usage error (argparse), 1 any other error with a one-line message
on stderr. A :class:`~memq.errors.MemqError` never shows a traceback: tracebacks are for bugs.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence

from memq.cli import admin, embeddings, model, worker, writer
from memq.errors import MemqError

GROUPS = (writer, worker, admin, model, embeddings)
"""Each module has ``register(subparsers)`` that adds its commands with a ``func``."""


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="memq", description="memq: the state and memory service for AI agents."
    )
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", required=True)
    for group in GROUPS:
        group.register(sub)
    return parser


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
