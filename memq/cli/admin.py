"""Database administration: ``migrate``, ``rebuild``, ``rejected list|replay|drop``."""

from __future__ import annotations

import argparse
import sys
from typing import Any

from memq import authority, broker
from memq.cli.common import (
    add_store_options,
    add_wait_option,
    load_config,
    person,
    print_json,
    read_database,
    wait_committed,
    whole_number,
)
from memq.printable import printable
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
    parser.add_argument("--json", action="store_true", help="one JSON object")
    parser.set_defaults(func=rejected_list)
    parser = rsub.add_parser("replay", help="send rejected events through the inbox again")
    add_store_options(parser)
    parser.add_argument("ids", nargs="*", type=whole_number, metavar="ID")
    parser.add_argument("--all", action="store_true", help="replay every unreplayed one")
    parser.set_defaults(func=rejected_replay)
    parser = rsub.add_parser("drop", help="drop rejected events, having read why")
    add_store_options(parser)
    parser.add_argument("ids", nargs="+", type=whole_number, metavar="ID")
    add_wait_option(parser)
    parser.set_defaults(func=rejected_drop)


def migrate(args: argparse.Namespace) -> int:
    from memq.store import legacy, schema
    from memq.store.write.lock import WriterLock

    config = load_config(args)
    bar = _LazyBar("importing legacy")
    with WriterLock(config.db_path, doing="migrate"):
        token = legacy.import_progress.set(bar.report)
        try:
            conn, done = schema.open_migrated(config.db_path)
            conn.close()
        finally:
            legacy.import_progress.reset(token)
            bar.finish()
    print(f"applied: {', '.join(done)}" if done else "schema is up to date")
    return 0


def rebuild(args: argparse.Namespace) -> int:
    from memq.store import rebuild as rebuilding

    config = load_config(args)
    rebuilding.ensure_exists(config.db_path)
    if args.check:
        differences = rebuilding.check(config.db_path)
        for line in differences:
            print(line)
        print("projections differ from the log" if differences else "projections match the log")
        return 1 if differences else 0
    total = rebuilding.event_count(config.db_path)
    bar = _LazyBar("rebuilding")  # drawn once the writer's lock is held, not before a refusal
    try:
        count = rebuilding.rebuild(config.db_path,
                                   lambda done: bar.report("projections", done, total))
        bar.report("projections", count, total)
    finally:
        bar.finish()
    print(f"rebuilt projections from {count} events")
    return 0


class _LazyBar:
    """A progress bar per legacy table, that appears only once there is something to report."""

    def __init__(self, label: str) -> None:
        self.label = label
        self.table: str | None = None
        self.bar: Progress | None = None

    def report(self, table: str, done: int, total: int) -> None:
        if self.bar is None or table != self.table:
            self.finish()
            self.table, self.bar = table, Progress(f"{self.label} {table}", total)
        self.bar.advance(done - self.bar.done)

    def finish(self) -> None:
        if self.bar is not None:
            self.bar.finish()
            self.bar = None


def rejected_list(args: argparse.Namespace) -> int:
    from memq.store.read import rejected

    rows = read_database(load_config(args).db_path,
                         lambda conn: rejected.list_rejected(conn, include_replayed=args.all))
    if args.json:
        print_json({"rejected": [{**row.__dict__, "raw": row.raw.decode("utf-8", "replace")}
                                 for row in rows]})
    elif not rows:
        print("no rejected events")
    else:
        print(f"{'id':>6}  {'rejected at':<27}  {'attempts':>8}  {'sent by':<7}  "
              f"{'replayed at':<27}  reason")
        for row in rows:
            sender = authority.ROLE_OF_STREAM.get(row.stream, row.stream)
            # Reasons quote what was sent; older rows were stored before they were escaped.
            print(f"{row.id:>6}  {row.rejected_at:<27}  {row.attempts:>8}  {sender:<7}  "
                  f"{row.replayed_at or '-':<27}  {printable(row.reason, one_line=True)}")
    return 0


def rejected_replay(args: argparse.Namespace) -> int:
    from memq.errors import ValidationError
    from memq.rejections import replay
    from memq.store.read import rejected

    if not args.ids and not args.all:
        raise ValidationError("name the rejected event ids to replay, or pass --all")
    config = load_config(args)
    rows = read_database(config.db_path, lambda conn: (
        rejected.list_rejected(conn) if args.all else [rejected.get(conn, i) for i in args.ids]))
    with broker.translated(config.redis_url, "replaying rejected events"):
        replay(broker.client_for(config), rows)
    print(f"replayed {len(rows)} event(s)", file=sys.stdout)
    return 0


def rejected_drop(args: argparse.Namespace) -> int:
    with person(args) as client:
        client.drop_rejected(args.ids)
        wait_committed(client, args.wait)
    print(f"dropped {len(args.ids)} rejected event(s)")
    return 0
