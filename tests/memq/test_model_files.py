"""The embedding model directory: complete and checksummed, or a clear error."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from memq.errors import ModelError
from memq.model_files import FILES, ensure_model, is_complete, verify
from tests.conftest import MODEL_DIR


def test_assembled_model_verifies() -> None:
    assert verify(MODEL_DIR) == MODEL_DIR
    assert ensure_model(MODEL_DIR) == MODEL_DIR  # already there: no download


def test_missing_file_is_named(tmp_path: Path) -> None:
    for name in FILES:
        if name != "tokenizer.json":
            shutil.copy(MODEL_DIR / name, tmp_path / name)
    with pytest.raises(ModelError, match=r"tokenizer\.json"):
        verify(tmp_path)
    assert not is_complete(tmp_path)


def test_corrupt_file_fails_its_checksum(tmp_path: Path) -> None:
    for name in FILES:
        shutil.copy(MODEL_DIR / name, tmp_path / name)
    with (tmp_path / "config.json").open("a") as fh:
        fh.write(" ")
    with pytest.raises(ModelError, match=r"config\.json does not match its sha256"):
        verify(tmp_path)


def test_a_model_directory_that_cannot_be_made_is_named_before_any_download() -> None:
    with pytest.raises(ModelError, match="cannot make the model directory /proc/nope"):
        ensure_model("/proc/nope")
