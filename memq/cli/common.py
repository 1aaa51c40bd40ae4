"""Options and helpers shared by the command modules."""

from __future__ import annotations

import argparse
import dataclasses
import os
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, TypeVar

from memq import config as config_module
from memq.config import Config

if TYPE_CHECKING:
    import apsw

T = TypeVar("T")


def add_store_options(
    parser: argparse.ArgumentParser, *, redis: bool = True,
    redis_help: str = "Redis URL (default: $MEMQ_REDIS_URL)",
) -> None:
    parser.add_argument("--config", help="path of memq.toml (default: $MEMQ_CONFIG)")
    parser.add_argument("--db", help="SQLite file (default: $MEMQ_DB or data/memq.db)")
    if redis:
        parser.add_argument("--redis-url", help=redis_help)


def port(text: str) -> int:
    """An argparse type: a TCP port number (0 picks a free one)."""
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a port number: {text!r}") from None
    if not 0 <= value <= 65535:
        raise argparse.ArgumentTypeError(f"a port is between 0 and 65535, got {value}")
    return value


def positive_seconds(text: str) -> float:
    """An argparse type: a duration in seconds, greater than zero."""
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a number of seconds: {text!r}") from None
    if not value > 0 or value == float("inf"):
        raise argparse.ArgumentTypeError(f"must be a positive number of seconds, got {text}")
    return value


def load_config(args: argparse.Namespace, *, discover_redis: bool = True) -> Config:
    """The configuration, with command-line options winning over file and environment.

    With no Redis URL configured anywhere, a command finds the private Redis that
    ``memq up`` runs for the same data directory (see :func:`private_redis_url`).
    """
    config = config_module.load(getattr(args, "config", None))
    if getattr(args, "db", None):
        config = config.replace(db_path=args.db)
    if getattr(args, "redis_url", None):
        config = config.replace(redis_url=args.redis_url)
    elif (discover_redis and config.redis_url == config_module.DEFAULT_REDIS_URL
          and not os.environ.get("MEMQ_REDIS_URL")):
        config = config.replace(redis_url=private_redis_url(config.db_path) or config.redis_url)
    if getattr(args, "model_dir", None):
        config = config.replace(embed=dataclasses.replace(config.embed, model_dir=args.model_dir))
    return config


def read_database(db_path: str, query: Callable[[apsw.Connection], T]) -> T:
    """``query`` on a read-only connection to ``db_path``, closed afterwards."""
    from store.connection import open_connection

    conn = open_connection(db_path, readonly=True)
    try:
        return query(conn)
    finally:
        conn.close()


PRIVATE_REDIS_URL_FILE = "redis.url"
"""Written (0600) into the data directory by ``memq up`` while its private Redis runs."""


def private_redis_url(db_path: str) -> str | None:
    """The URL of the private Redis ``memq up`` runs for ``db_path``'s directory, if any."""
    try:
        path = Path(db_path).resolve().parent / PRIVATE_REDIS_URL_FILE
        return path.read_text().strip() or None
    except (OSError, ValueError):  # none there, or a path the command will refuse anyway
        return None
