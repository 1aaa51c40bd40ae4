"""``memq facts list|history``: what the agents and users have recorded, from the database."""

from __future__ import annotations

import argparse
import dataclasses
from typing import Any

import orjson

from memq.cli.common import add_store_options, load_config, read_database


def register(sub: Any) -> None:
    facts = sub.add_parser("facts", help="facts and their history")
    fsub = facts.add_subparsers(dest="action", metavar="ACTION", required=True)
    parser = fsub.add_parser("list", help="current facts, by category and key")
    add_store_options(parser, redis=False)
    parser.add_argument("--category", help="only this category")
    parser.add_argument("--json", action="store_true", help="one JSON object per line")
    parser.set_defaults(func=list_facts)
    parser = fsub.add_parser("history", help="every change of one fact, oldest first")
    add_store_options(parser, redis=False)
    parser.add_argument("category")
    parser.add_argument("key")
    parser.add_argument("--json", action="store_true", help="one JSON object per line")
    parser.set_defaults(func=history)


def list_facts(args: argparse.Namespace) -> int:
    from store import fact_reads

    facts = read_database(load_config(args).db_path,
                          lambda conn: fact_reads.list_facts(conn, args.category))
    for fact in facts:
        if args.json:
            print(orjson.dumps(dataclasses.asdict(fact)).decode())
        else:
            print(f"{fact.category}/{fact.key} = {fact.value!r}  [{fact.source}, "
                  f"updated {fact.updated_at}]")
    if not facts and not args.json:
        print("no facts" + (f" in category {args.category!r}" if args.category else ""))
    return 0


def history(args: argparse.Namespace) -> int:
    from store import fact_reads

    changes = read_database(load_config(args).db_path,
                            lambda conn: fact_reads.fact_history(conn, args.category, args.key))
    for change in changes:
        if args.json:
            print(orjson.dumps(dataclasses.asdict(change)).decode())
            continue
        what = f"set {change.value!r}" if change.action == "set" else "deleted"
        forced = " (force)" if change.force else ""
        outcome = "" if change.applied else "  not applied: the user's value is protected"
        print(f"{change.created_at}  {change.source}: {what}{forced}{outcome}")
    if not changes and not args.json:
        print(f"no changes recorded for {args.category}/{args.key}")
    return 0

