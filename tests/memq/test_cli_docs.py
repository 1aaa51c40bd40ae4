"""Every command of the CLI is documented in the command line reference, docs/cli.md (as
sqlite-utils does it): a command added without its line fails here, named."""

from __future__ import annotations

import argparse

from memq.cli import command_parsers
from tests.conftest import ROOT


def command_paths() -> list[str]:
    """``memq <command>`` and ``memq <command> <action>`` for every (sub)command."""
    paths = []
    for name, parser in sorted(command_parsers().items()):
        paths.append(f"memq {name}")
        for action in parser._actions:  # argparse keeps nested subcommands only here
            if isinstance(action, argparse._SubParsersAction):
                paths += [f"memq {name} {sub}" for sub in sorted(action.choices)]
    return paths


def test_command_paths_cover_nested_commands() -> None:
    paths = command_paths()
    assert "memq up" in paths
    assert "memq rejected replay" in paths


def test_every_command_is_documented() -> None:
    reference = (ROOT / "docs" / "cli.md").read_text()
    missing = [path for path in command_paths() if f"`{path}" not in reference]
    assert not missing, f"docs/cli.md does not document: {', '.join(missing)}"
