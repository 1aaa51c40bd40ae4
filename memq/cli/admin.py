"""Database administration: ``migrate``, ``rebuild``, ``rejected``."""

from __future__ import annotations

import argparse
import sys
from typing import Any

import orjson

from memq import broker, names
from memq.cli.common import add_store_options, load_config, read_database
from memq.progress import Progress


def register(sub: Any) -> None:
    parser = sub.add_parser("migrate", help="create or upgrade the database schema")
    add_store_options(parser, redis=False)
    parser.set_defaults(func=migrate)

    parser = sub.add_parser("rebuild", help="rebuild every projection from the event log")
    add_store_options(parser, redis=False)
    parser.add_argument("--check", action="store_true",
                        help="compare only; exit 1 if the projections differ from the log")
    parser.set_defaults(func=rebuild)

    rejected = sub.add_parser("rejected", help="events the writer set aside")
    rsub = rejected.add_subparsers(dest="action", metavar="ACTION", required=True)
    parser = rsub.add_parser("list", help="list rejected events and their reasons")
    add_store_options(parser, redis=False)
    parser.add_argument("--all", action="store_true", help="include replayed ones")
    parser.add_argument("--json", action="store_true", help="one JSON object per line")
    parser.set_defaults(func=rejected_list)
    parser = rsub.add_parser("replay", help="send rejected events through the inbox again")
    add_store_options(parser)
    parser.add_argument("ids", nargs="*", type=int, metavar="ID")
    parser.add_argument("--all", action="store_true", help="replay every unreplayed one")
    parser.set_defaults(func=rejected_replay)


def migrate(args: argparse.Namespace) -> int:
    from store import legacy, schema
    from store.connection import open_connection
    from store.lock import WriterLock

    config = load_config(args)
    bar = _LazyBar("importing legacy messages")
    with WriterLock(config.db_path):
        conn = open_connection(config.db_path)
        token = legacy.import_progress.set(bar.report)
        try:
            done = schema.migrate(conn)
        finally:
            legacy.import_progress.reset(token)
            bar.finish()
            conn.close()
    print(f"applied: {', '.join(done)}" if done else "schema is up to date")
    return 0


def rebuild(args: argparse.Namespace) -> int:
    from store import rebuild as rebuilding

    config = load_config(args)
    rebuilding.ensure_exists(config.db_path)
    if args.check:
        differences = rebuilding.check(config.db_path)
        for line in differences:
            print(line)
        print("projections differ from the log" if differences else "projections match the log")
        return 1 if differences else 0
    bar = Progress("rebuilding projections", rebuilding.event_count(config.db_path))
    with bar:
        count = rebuilding.rebuild(config.db_path, lambda done: bar.advance(done - bar.done))
        bar.advance(count - bar.done)
    print(f"rebuilt projections from {count} events")
    return 0


class _LazyBar:
    """A progress bar that appears only once there is something to report."""

    def __init__(self, label: str) -> None:
        self.label = label
        self.bar: Progress | None = None

    def report(self, done: int, total: int) -> None:
        if self.bar is None:
            self.bar = Progress(self.label, total)
        self.bar.advance(done - self.bar.done)

    def finish(self) -> None:
        if self.bar is not None:
            self.bar.finish()


def rejected_list(args: argparse.Namespace) -> int:
    from store import rejected

    rows = read_database(load_config(args).db_path,
                         lambda conn: rejected.list_rejected(conn, include_replayed=args.all))
    for row in rows:
        if args.json:
            raw = row.raw.decode("utf-8", "replace")
            print(orjson.dumps({**row.__dict__, "raw": raw}).decode())
        else:
            print(f"{row.id:>6}  {row.rejected_at}  x{row.attempts}  {row.reason}")
    if not rows and not args.json:
        print("no rejected events")
    return 0


def rejected_replay(args: argparse.Namespace) -> int:
    from memq.errors import ValidationError
    from store import rejected

    if not args.ids and not args.all:
        raise ValidationError("name the rejected event ids to replay, or pass --all")
    config = load_config(args)
    rows = read_database(config.db_path, lambda conn: (
        rejected.list_rejected(conn) if args.all else [rejected.get(conn, i) for i in args.ids]))
    client = broker.connect(config.redis_url)
    with broker.translated(config.redis_url, "replaying rejected events"):
        for row in rows:
            client.xadd(names.INBOX_STREAM,
                        {names.EVENT_FIELD: row.raw, names.REPLAY_FIELD: str(row.id)})
    print(f"replayed {len(rows)} event(s)", file=sys.stdout)
    return 0
