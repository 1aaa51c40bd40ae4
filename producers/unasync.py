"""Write the async surface from the sync one: ``python -m memq.producers.unasync``.

The async clients' methods are the sync clients' as coroutines, word for word: this
rewrites ``surface.py`` into ``surface_async.py`` (each method ``async``, each call to the
transport awaited). ``--check`` exits 1 if the file on disk is not what it would write;
a test runs the same check, so the two cannot drift apart.
"""

from __future__ import annotations

import re
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
SOURCE = HERE / "surface.py"
TARGET = HERE / "surface_async.py"

HEADER = ('"""The async clients\' methods, generated from ``surface.py`` by\n'
          "``python -m memq.producers.unasync``: edit that file and run it again (a test "
          'fails\nwhile the two differ)."""\n')

REWRITES = [
    (re.compile(r"^    def (?!_)", re.M), "    async def "),
    (re.compile(r"^    def _call\(", re.M), "    async def _call("),
    (re.compile(r"return self\._call\("), "return await self._call("),
    # A method built on another (``changes`` on ``changes_page``): an async generator.
    (re.compile(r"= self\.(\w+)\("), r"= await self.\1("),
    (re.compile(r"-> Iterator\["), "-> AsyncIterator["),
    (re.compile(r"import Iterator, "), "import AsyncIterator, "),
    (re.compile(r"\bclass Surface\b"), "class AsyncSurface"),
    (re.compile(r'__all__ = \["Surface"\]'), '__all__ = ["AsyncSurface"]'),
]


def render(source: str) -> str:
    """The async twin of ``source``: its docstring replaced, its methods made coroutines."""
    body = source.split('"""', 2)[2].lstrip("\n")
    for pattern, replacement in REWRITES:
        body = pattern.sub(replacement, body)
    return HEADER + "\n" + body


def drifted() -> bool:
    return not TARGET.exists() or TARGET.read_text() != render(SOURCE.read_text())


def main(argv: list[str]) -> int:
    if "--check" in argv:
        if drifted():
            print(f"{TARGET.name} is not what {SOURCE.name} makes: run "
                  "python -m memq.producers.unasync", file=sys.stderr)
            return 1
        return 0
    TARGET.write_text(render(SOURCE.read_text()))
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
