"""The rules between packages, checked: a failure names the importing file and line.

    memq (the contract)  imports no role; the CLI (memq/cli/) and the test helpers
                         (memq/testing.py) compose them and may import all three
    memq.store           never imports memq.producers or memq.workers
    memq.workers         never imports memq.store, and never opens a database
    memq.producers       never imports memq.workers or memq.server; of the store, only its
                         read side (memq.store.read); and runs no SQL of its own (no apsw)
    memq.server          (`memq serve`) never imports memq.workers; of the store, only its
                         read side; no SQL of its own
    bench                never imports tests
    memq.integrations    each adapter imports only memq's public facade (`from memq import
                         ...`), the standard library, the package's own helpers and its
                         framework; nothing imports the adapters but the CLI's `memq mcp`
                         and their benchmark (bench/adapters.py)
    everything           imports the roles as memq.<role>, never by their folder names
"""

from __future__ import annotations

import ast
import re
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
ROLES = ("memq.store", "memq.producers", "memq.workers", "memq.server")
ROLE_FOLDERS = ("store", "producers", "workers", "server")
DATABASE_DRIVERS = ("apsw", "sqlite3")

# memq/__init__.py is the public facade: it names the client and its result types for the
# type checker (under TYPE_CHECKING) and loads them lazily, so importing the contract does
# not import a role at run time.
FACADE = ROOT / "memq" / "__init__.py"
COMPOSERS = (FACADE, ROOT / "memq" / "testing.py")


def imports(path: Path) -> Iterator[tuple[int, str]]:
    """Every module a file imports, absolute, with its line."""
    tree = ast.parse(path.read_text(), filename=str(path))
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for alias in node.names:
                yield node.lineno, alias.name
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            yield node.lineno, node.module
            for alias in node.names:  # `from memq import store` imports memq.store
                yield node.lineno, f"{node.module}.{alias.name}"


def files(folder: str) -> list[Path]:
    return sorted((ROOT / folder).rglob("*.py"))


def contract_files() -> list[Path]:
    return [p for p in files("memq")
            if p.relative_to(ROOT / "memq").parts[0] not in {"cli", "integrations"}
            and p not in COMPOSERS and not _under_role(p)]


def _under_role(path: Path) -> bool:
    return path.relative_to(ROOT / "memq").parts[0] in ROLE_FOLDERS


def violations(paths: list[Path], forbidden: tuple[str, ...]) -> list[str]:
    found: dict[str, str] = {}  # one report per line
    for path in paths:
        shown = path.relative_to(ROOT) if path.is_relative_to(ROOT) else path
        for line, module in imports(path):
            if any(module == f or module.startswith(f + ".") for f in forbidden):
                found.setdefault(f"{shown}:{line}", f"{shown}:{line} imports {module}")
    return list(found.values())


@pytest.mark.parametrize(
    ("folder", "forbidden"),
    [
        ("store", ("memq.producers", "memq.workers")),
        ("workers", ("memq.store", *DATABASE_DRIVERS)),
        ("producers", ("memq.workers", "memq.server", *DATABASE_DRIVERS)),
        ("server", ("memq.workers", *DATABASE_DRIVERS)),
        ("bench", ("tests",)),
    ],
)
def test_role_imports(folder: str, forbidden: tuple[str, ...]) -> None:
    assert violations(files(folder), forbidden) == []


@pytest.mark.parametrize("folder", ["producers", "server"])
def test_readers_use_only_the_stores_read_side(folder: str) -> None:
    found = [v for v in violations(files(folder), ("memq.store",))
             if not v.split(" imports ")[1].startswith("memq.store.read")]
    assert found == []


def test_the_contract_imports_no_role() -> None:
    paths = contract_files()
    assert len(paths) > 10  # the walk found the contract's modules
    assert violations(paths, ROLES) == []


def test_roles_are_imported_under_memq() -> None:
    everything = [p for folder in ("memq", *ROLE_FOLDERS, "tests", "bench")
                  for p in files(folder)]
    assert violations(everything, ROLE_FOLDERS) == []


def test_the_walk_sees_a_forbidden_import(tmp_path: Path) -> None:
    bad = tmp_path / "bad.py"
    bad.write_text("import os\n\ndef f():\n    from memq.store.read import pool\n")
    assert violations([bad], ("memq.store",)) == [f"{bad}:4 imports memq.store.read"]


def test_the_role_folders_are_the_packages_under_memq() -> None:
    for role in ROLE_FOLDERS:
        link = ROOT / "memq" / role
        assert link.is_symlink(), role
        assert link.resolve() == ROOT / role, role


SQL = re.compile(r"\b(SELECT\b.+\bFROM|INSERT\s+INTO|UPDATE\s+\w+\s+SET|DELETE\s+FROM|PRAGMA\s+\w+"
                 r"|CREATE\s+(TABLE|INDEX))\b", re.S)


def sql_literals(path: Path) -> list[str]:
    tree = ast.parse(path.read_text(), filename=str(path))
    return [f"{path.relative_to(ROOT)}:{node.lineno}" for node in ast.walk(tree)
            if isinstance(node, ast.Constant) and isinstance(node.value, str)
            and SQL.search(node.value)]


def test_sql_lives_in_store() -> None:
    outside = [p for folder in ("memq", "producers", "workers", "server") for p in files(folder)
               if not _folder_is_role(p, "store")]
    assert [hit for path in outside for hit in sql_literals(path)] == []
    assert sql_literals(ROOT / "store" / "read" / "messages.py")  # the check sees SQL


def _folder_is_role(path: Path, role: str) -> bool:
    parts = path.relative_to(ROOT).parts
    return parts[0] == role or parts[:2] == ("memq", role)


def module_name(path: Path) -> str:
    parts = list(path.relative_to(ROOT).with_suffix("").parts)
    if parts[0] != "memq":
        parts.insert(0, "memq")
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def top_level_imports(path: Path) -> set[str]:
    """Modules imported when ``path`` is imported (not in functions, not TYPE_CHECKING)."""
    found = set()
    for node in ast.parse(path.read_text()).body:
        if isinstance(node, ast.Import):
            found |= {alias.name for alias in node.names}
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            found.add(node.module)
            found |= {f"{node.module}.{alias.name}" for alias in node.names}
    return {name for name in found if name.startswith("memq.")}


def test_no_import_cycles() -> None:
    paths = [p for folder in ("memq", *ROLE_FOLDERS) for p in files(folder)]
    graph = {module_name(p): top_level_imports(p) for p in paths}
    graph = {m: {d for d in deps if d in graph and d != m} for m, deps in graph.items()}
    cycles = []
    for start in graph:
        stack, seen = [(start, (start,))], set()
        while stack:
            module, route = stack.pop()
            for dep in graph[module]:
                if dep == start:
                    cycles.append(" -> ".join((*route, dep)))
                elif dep not in seen:
                    seen.add(dep)
                    stack.append((dep, (*route, dep)))
    assert cycles == []


INTEGRATIONS = ROOT / "memq" / "integrations"
FRAMEWORKS = {"langchain": ("langchain_core",), "openai_agents": ("agents", "openai"),
              "langgraph": ("langgraph",), "mcp": ("mcp", "pydantic", "uvicorn")}
"""What each adapter may import besides the facade and the standard library."""


def _allowed_in_adapter(module: str, frameworks: tuple[str, ...]) -> bool:
    import memq

    parts = module.split(".")
    top = parts[0]
    if top == "memq":
        return (module == "memq" or parts[1] == "integrations"
                or (len(parts) == 2 and parts[1] in memq.__all__))
    return top in sys.stdlib_module_names or top == "__future__" or top in frameworks


def test_adapters_import_only_the_facade_and_their_framework() -> None:
    found = []
    for path in sorted(INTEGRATIONS.glob("*.py")):
        frameworks = FRAMEWORKS.get(path.stem, ())
        found += [f"{path.relative_to(ROOT)}:{line} imports {module}"
                  for line, module in imports(path)
                  if not _allowed_in_adapter(module, frameworks)]
    assert len(list(INTEGRATIONS.glob("*.py"))) >= 3  # the walk found the adapters
    assert found == []


def test_nothing_imports_the_adapters() -> None:
    paths = [p for folder in ("memq", "store", "producers", "workers", "bench")
             for p in files(folder) if not p.is_relative_to(INTEGRATIONS)]
    found = [v for v in violations(paths, ("memq.integrations",))
             if not v.startswith(("memq/cli/mcp.py:", "bench/adapters.py:"))]
    assert found == []


def test_the_adapter_rule_sees_a_role_import() -> None:
    assert not _allowed_in_adapter("memq.store.read", ())
    assert not _allowed_in_adapter("memq.producers.client", ())
    assert not _allowed_in_adapter("langgraph.store.base", ("langchain_core",))
    assert _allowed_in_adapter("memq.MemoryClient", ())
    assert _allowed_in_adapter("memq.integrations._client.MessageClient", ())
