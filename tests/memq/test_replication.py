"""The Litestream boundary: its binary, the replica URLs it knows, the configuration."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import orjson
import pytest
from hypothesis import given
from hypothesis import strategies as st

from memq import replication
from memq.config import ReplicationConfig, from_mapping
from memq.errors import ConfigError


def test_the_binary_ships_with_the_package() -> None:
    found = replication.binary()
    assert os.access(found, os.X_OK)
    done = subprocess.run([found, "version"], capture_output=True, text=True, timeout=30,
                          check=True)
    assert done.stdout.strip().startswith("0.5")


def test_the_configuration_names_the_database_and_its_replica(tmp_path: Path) -> None:
    text = replication.config_text(tmp_path / "memq.db",
                                   ReplicationConfig(url="file:///backups/memq"))
    (database,) = orjson.loads(text)["dbs"]
    assert database["path"] == str((tmp_path / "memq.db").resolve())
    assert database["replica"] == {"url": "file:///backups/memq", "sync-interval": "1s"}
    written = replication.write_config(tmp_path / "memq.db",
                                       ReplicationConfig(url="s3://bucket/memq"))
    assert written.stat().st_mode & 0o777 == 0o600


@pytest.mark.parametrize("url", ["file:///dir", "s3://bucket/path",
                                 "s3://bucket/path?endpoint=http://127.0.0.1:9000"])
def test_known_replica_urls_pass(url: str) -> None:
    assert replication.replica_url(url) == url


def test_a_plain_directory_becomes_a_file_url(tmp_path: Path) -> None:
    assert replication.replica_url(str(tmp_path)) == tmp_path.resolve().as_uri()


@given(st.text(max_size=40).map(lambda rest: f"http://{rest}"))
def test_unknown_schemes_are_refused(url: str) -> None:
    with pytest.raises(ConfigError):
        replication.replica_url(url)


def test_the_inbox_must_outlast_the_replica_lag() -> None:
    with pytest.raises(ConfigError, match="keep_inbox_s"):
        from_mapping({"replication": {"url": "file:///r", "sync_interval_s": 10,
                                      "keep_inbox_s": 30}})
    quiet = from_mapping({"replication": {"keep_inbox_s": 30}})
    assert quiet.replication.inbox_retention_s == 0.0  # no replica: nothing to keep for
    kept = from_mapping({"replication": {"url": "file:///r"}})
    assert kept.replication.inbox_retention_s == 600.0
