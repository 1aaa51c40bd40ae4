"""ruff over the whole tree, in the suite: its settings are pyproject.toml's, and a change
that breaks them fails `make test` rather than waiting for someone to run `make lint`."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

from tests.conftest import ROOT


def test_ruff_finds_nothing() -> None:
    ruff = shutil.which("ruff", path=str(Path(sys.executable).parent)) or shutil.which("ruff")
    assert ruff is not None, "ruff is a dev extra: `make bootstrap-dev` installs it"
    done = subprocess.run([ruff, "check", "--quiet", "."], cwd=ROOT, capture_output=True,
                          text=True, timeout=120, check=False)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-1000:]
