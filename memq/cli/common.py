"""Options and helpers shared by the command modules."""

from __future__ import annotations

import argparse
import dataclasses

from memq import config as config_module
from memq.config import Config


def add_store_options(parser: argparse.ArgumentParser, *, redis: bool = True) -> None:
    parser.add_argument("--config", help="path of memq.toml (default: $MEMQ_CONFIG)")
    parser.add_argument("--db", help="SQLite file (default: $MEMQ_DB or data/memq.db)")
    if redis:
        parser.add_argument("--redis-url", help="Redis URL (default: $MEMQ_REDIS_URL)")


def load_config(args: argparse.Namespace) -> Config:
    """The configuration, with command-line options winning over file and environment."""
    config = config_module.load(getattr(args, "config", None))
    if getattr(args, "db", None):
        config = config.replace(db_path=args.db)
    if getattr(args, "redis_url", None):
        config = config.replace(redis_url=args.redis_url)
    if getattr(args, "model_dir", None):
        config = config.replace(embed=dataclasses.replace(config.embed, model_dir=args.model_dir))
    return config
