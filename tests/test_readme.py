"""The Python examples of the README and of the documentation's pages (docs/) run as
printed against the stack `make run` starts.

A fresh directory is laid out as a clone is after `make bootstrap` (the model files under
``models/``); ``memq up`` runs there as `make run` would; then every fenced ``python``
block of the README is written to a file, unchanged, and run from that directory with no
memq setting in the environment: exactly what a reader who copies an example does.
"""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
import redis

from memq import names
from tests.conftest import MODEL_DIR, ROOT

pytestmark = [pytest.mark.redis, pytest.mark.model, pytest.mark.slow]

BLOCK = re.compile(r"^```python\n(.*?)^```$", re.MULTILINE | re.DOTALL)


PAGES = ["README.md", *(f"docs/{page}" for page in (
    "architecture.md", "agents.md", "adapters.md", "cli.md", "configuration.md",
    "operations.md", "console.md", "security.md", "reliability.md", "retrieval.md", "benchmarks.md",
    "legacy-layout.md", "index.md"))]
"""The README, then the documentation's pages in the site's order (mkdocs.yml)."""


def python_blocks() -> list[str]:
    return [block for page in PAGES for block in BLOCK.findall((ROOT / page).read_text())]


def test_every_page_of_the_site_is_read_here() -> None:
    """A page added to the site has its examples run too."""
    assert sorted(PAGES[1:]) == sorted(f"docs/{p.name}" for p in (ROOT / "docs").glob("*.md"))
    nav = (ROOT / "mkdocs.yml").read_text()
    assert all(page.removeprefix("docs/") in nav for page in PAGES[1:])


def clean_env() -> dict[str, str]:
    """The reader's shell: no memq setting, so the examples find what `memq up` left."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("MEMQ_")}
    env["PYTHONPATH"] = str(ROOT)
    return env


@pytest.fixture(scope="module")
def stack(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    """`memq up` in a directory of its own, as `make run` starts it (without the demo)."""
    home = tmp_path_factory.mktemp("readme")
    (home / "models").mkdir()
    (home / "models" / MODEL_DIR.name).symlink_to(MODEL_DIR.resolve())
    proc = subprocess.Popen([sys.executable, "-m", "memq", "up"], cwd=home, env=clean_env(),
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        wait_for_the_writer(home, proc)
        yield home
    finally:
        proc.send_signal(signal.SIGTERM)
        proc.wait(90)


def wait_for_the_writer(home: Path, proc: subprocess.Popen[bytes]) -> None:
    url_file = home / "data" / "admin.url"
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline and proc.poll() is None:
        if url_file.exists():
            client = redis.Redis.from_url(url_file.read_text().strip())
            if client.exists(names.WRITER_HEARTBEAT_KEY):
                return
        time.sleep(0.1)
    pytest.fail(f"memq up did not start a writer (exit status {proc.poll()})")


def test_the_readme_has_the_examples_this_test_runs() -> None:
    blocks = python_blocks()
    assert len(blocks) >= 5
    assert blocks[0].startswith("from memq import MemoryClient\n")
    assert "MemoryClient.from_env()" in blocks[0]


def the_agent_example_prints_what_it_stored(block: str, out: str) -> None:
    assert "user Book the Lisbon flight for March 5th" in out.splitlines()


def the_macro_example_finds_the_habit(block: str, out: str) -> None:
    # The id the page prints is the one a user gets: a hash of the transition.
    printed = re.search(r"# \[MacroSuggestion\(macro_id=(\d+),", block)
    assert printed is not None
    assert f"MacroSuggestion(macro_id={printed.group(1)}, " in out
    # The path just read is carried over into the suggested call.
    assert "tool='edit_file', args={'patch': '...', 'path': 'lib/x.py'}" in out


def output_check(number: int, block: str) -> Callable[[str, str], None] | None:
    """What an example must print besides running cleanly, where its page says so."""
    if number == 0:
        return the_agent_example_prints_what_it_stored
    if "suggest_next_tools" in block and "MacroSuggestion(macro_id=" in block:
        return the_macro_example_finds_the_habit
    return None


def test_the_examples_whose_output_is_checked_are_found() -> None:
    blocks = python_blocks()
    checks = [output_check(n, block) for n, block in enumerate(blocks)]
    assert checks.count(the_macro_example_finds_the_habit) == 1
    assert checks[0] is the_agent_example_prints_what_it_stored


@pytest.mark.parametrize("number", range(len(python_blocks())))
def test_each_example_runs_as_printed(stack: Path, number: int) -> None:
    """Each example once, in a process of its own (as a reader runs it), with its output
    checked where the page says what it prints."""
    block = python_blocks()[number]
    script = stack / f"example_{number}.py"
    script.write_text(block)
    done = subprocess.run([sys.executable, script.name], cwd=stack, env=clean_env(),
                          capture_output=True, text=True, timeout=120, check=False)
    assert done.returncode == 0, done.stderr[-3000:]
    assert "Traceback" not in done.stderr
    check = output_check(number, block)
    if check is not None:
        check(block, done.stdout)
