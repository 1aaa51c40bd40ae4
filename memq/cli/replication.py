"""The database beyond its disk: ``replicate`` (Litestream), ``restore``, ``backup``."""

from __future__ import annotations

import argparse
import os
import sys
import threading
from pathlib import Path
from typing import Any

from memq import logs, replication
from memq.cli.common import add_store_options, load_config
from memq.errors import ConfigError, StoreError
from memq.progress import Progress
from memq.signals import stop_on_signals


def register(sub: Any) -> None:
    parser = sub.add_parser("replicate", help="replicate the database continuously to "
                            "[replication] url with Litestream (foreground)")
    add_store_options(parser, redis=False)
    parser.add_argument("--if-configured", action="store_true",
                        help="without [replication] url, wait quietly until stopped instead of "
                             "failing (the Procfile's line: a supervisor that stops everything "
                             "when one process exits keeps running)")
    parser.set_defaults(func=replicate)

    parser = sub.add_parser("restore", help="rebuild the database from its replica or a backup")
    add_store_options(parser, redis=False)
    parser.add_argument("--from", dest="source", metavar="URL",
                        help="a replica URL (file:///dir, s3://...) or a `memq backup` file "
                             "(default: [replication] url)")
    parser.add_argument("--force", action="store_true",
                        help="replace an existing database (its files are moved aside, "
                             "not deleted)")
    parser.set_defaults(func=restore)

    parser = sub.add_parser("backup", help="copy the database, online and consistent")
    add_store_options(parser, redis=False)
    parser.add_argument("path", metavar="PATH", help="the new file to write")
    parser.set_defaults(func=backup)


def replicate(args: argparse.Namespace) -> int:
    logs.setup()
    config = load_config(args, discover_redis=False)
    if not config.replication.url and args.if_configured:
        stopped = _stop_on_signal()  # before saying so: a supervisor may stop it at once
        print("memq replicate: no [replication] url: nothing to replicate", file=sys.stderr)
        stopped.wait()
        return 0
    if not config.replication.url:
        raise ConfigError("no replica: set [replication] url in memq.toml "
                          "(e.g. url = \"file:///backups/memq\")")
    path = replication.write_config(config.db_path, config.replication)
    argv = replication.replicate_argv(path)
    # Litestream becomes this process: a supervisor's SIGTERM reaches it, and it then
    # ships what it has not yet shipped before it exits.
    os.execv(argv[0], argv)
    return 0  # not reached


def _stop_on_signal() -> threading.Event:
    """An event that SIGTERM or SIGINT sets (and no longer ends the process)."""
    return stop_on_signals()


def restore(args: argparse.Namespace) -> int:
    from memq.store import backup as copies  # the CLI alone may import the roles

    config = load_config(args, discover_redis=False)
    source = args.source or config.replication.url
    if not source:
        raise ConfigError("restore from where? give --from URL (or a backup file), "
                          "or set [replication] url")
    present = copies.existing_files(Path(config.db_path))
    if present and not args.force:  # before a long download, not after it
        raise ConfigError(f"{config.db_path} already exists: restoring would replace it; "
                          "move it away or pass --force")
    scratch = copies.scratch_path(config.db_path)
    try:
        if Path(source).is_file():
            _copy_file(Path(source), scratch)
        else:
            replication.restore(source, scratch)
        events = copies.check_copy(scratch, name=source)
        kept = copies.install(scratch, config.db_path, force=args.force)
    finally:
        copies.remove_scratch(scratch)
    print(f"restored {config.db_path} from {source}: {events} events")
    if kept is not None:
        print(f"the database it replaced is in {kept}")
    print("start the writer: it re-applies what the inbox holds beyond the restored state")
    return 0


def _copy_file(source: Path, dest: Path) -> None:
    try:
        _copy_bytes(source, dest)
    except OSError as exc:
        raise StoreError(f"cannot copy {source}: {exc.strerror or exc}") from exc


def _copy_bytes(source: Path, dest: Path) -> None:
    total = source.stat().st_size
    with Progress("copying", total) as bar, source.open("rb") as src, \
            open(dest, "xb") as out:
        os.chmod(dest, 0o600)
        while chunk := src.read(1 << 20):
            out.write(chunk)
            bar.advance(len(chunk))
        out.flush()
        os.fsync(out.fileno())


def backup(args: argparse.Namespace) -> int:
    from memq.store import backup as copies

    config = load_config(args, discover_redis=False)
    bar: Progress | None = None

    def report(done: int, total: int) -> None:
        nonlocal bar
        if bar is None:
            bar = Progress("backing up (pages)", total)
        bar.advance(done - bar.done)

    try:
        pages = copies.backup(config.db_path, args.path, report)
    finally:
        if bar is not None:
            bar.finish()
    size = Path(args.path).stat().st_size
    print(f"backed up {config.db_path} to {args.path}: {pages} pages, {size:,} bytes")
    return 0
