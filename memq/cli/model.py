"""``memq fetch-model``: assemble the embedding model's files for offline use."""

from __future__ import annotations

import argparse
from typing import Any

from memq.cli.common import load_config
from memq.model_files import ensure_model


def register(sub: Any) -> None:
    parser = sub.add_parser("fetch-model", help="download and verify the embedding model files")
    parser.add_argument("--config", help="path of memq.toml")
    parser.add_argument("--model-dir", help="target directory (default: [embed] model_dir)")
    parser.set_defaults(func=fetch_model)


def fetch_model(args: argparse.Namespace) -> int:
    config = load_config(args)
    path = ensure_model(config.embed.model_dir)
    print(f"embedding model ready in {path}")
    return 0
