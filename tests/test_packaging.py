"""The installed distribution: one import name, ``memq``, usable outside the source tree."""

from __future__ import annotations

import subprocess
import sys
import sysconfig
import venv
import zipfile
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def wheel(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("wheel")
    build = tmp_path_factory.mktemp("build")
    # Build from a copy of the tracked files (symlinks kept): setuptools writes build/ and
    # *.egg-info beside the sources.
    listed = subprocess.run(["git", "ls-files", "-z", "--cached", "--others", "--exclude-standard"],
                            cwd=ROOT, check=True, capture_output=True).stdout
    source = build / "memq"
    source.mkdir()
    packed = subprocess.run(["tar", "--null", "-T", "-", "-cf", "-"], cwd=ROOT, input=listed,
                            check=True, capture_output=True).stdout
    subprocess.run(["tar", "-xf", "-"], cwd=source, input=packed, check=True)
    subprocess.run([sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation",
                    "--quiet", "-w", str(out), str(source)], check=True)
    (found,) = out.glob("memq-*.whl")
    return found


def test_the_wheel_holds_only_memq(wheel: Path) -> None:
    with zipfile.ZipFile(wheel) as archive:
        names = archive.namelist()
        (top_level,) = [n for n in names if n.endswith(".dist-info/top_level.txt")]
        assert archive.read(top_level).decode().split() == ["memq"]
    tops = {name.split("/")[0] for name in names}
    assert {t for t in tops if not t.endswith(".dist-info")} == {"memq"}
    for package in ("memq/store/write/writer.py", "memq/store/read/pool.py",
                    "memq/producers/client.py", "memq/workers/embed.py", "memq/py.typed"):
        assert package in names


def test_memq_imports_outside_the_tree_beside_a_store_py(wheel: Path, tmp_path: Path) -> None:
    env_dir = tmp_path / "venv"
    venv.create(env_dir, with_pip=False)
    site = Path(sysconfig.get_path("purelib", vars={"base": str(env_dir),
                                                      "platbase": str(env_dir)}))
    with zipfile.ZipFile(wheel) as archive:
        archive.extractall(site)  # installing a pure-Python wheel is unpacking it
    # The dependencies come from this test's own environment, but not its memq: a plain
    # path in a .pth file does not run the editable install's finder.
    (site / "deps.pth").write_text(sysconfig.get_path("purelib") + "\n")
    work = tmp_path / "project"
    work.mkdir()
    (work / "store.py").write_text("WHO = 'the user'\n")
    (work / "producers.py").write_text("WHO = 'the user'\n")
    script = (
        "import importlib.util, memq, store, producers\n"
        "from memq import MemoryClient, MemqError, ContextItem\n"
        "assert store.WHO == producers.WHO == 'the user'\n"
        "assert importlib.util.find_spec('workers') is None\n"
        f"assert memq.__file__.startswith({str(site)!r}), memq.__file__\n"
        "print(MemoryClient.__module__)\n"
    )
    python = env_dir / "bin" / "python"
    done = subprocess.run([str(python), "-c", script], cwd=work, capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "memq.producers.client"
