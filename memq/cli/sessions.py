"""``memq sessions``: sessions by last activity, with their owner and message count."""

from __future__ import annotations

import argparse
import dataclasses
from typing import Any

from memq.cli.common import (
    add_store_options,
    integer_in,
    load_config,
    print_json,
    read_database,
)
from memq.printable import printable


def register(sub: Any) -> None:
    parser = sub.add_parser("sessions", help="sessions, most recently active first")
    parser.add_argument("--user", help="only this user's sessions")
    parser.add_argument("--agent", help="only this agent's sessions")
    parser.add_argument("--limit", type=integer_in("number of sessions", 1, 10_000), default=50,
                        help="how many (default 50)")
    parser.add_argument("--before", metavar="TIME",
                        help="only sessions last active before this RFC3339 time (paging)")
    parser.add_argument("--json", action="store_true", help="one JSON object")
    add_store_options(parser, redis=False)
    parser.set_defaults(func=list_sessions)


def list_sessions(args: argparse.Namespace) -> int:
    from memq.clock import normalize_rfc3339
    from memq.events import check_identifier
    from memq.store.read import sessions as session_reads

    for what, value in (("--user", args.user), ("--agent", args.agent)):
        if value is not None:
            check_identifier(what, value)
    before = None if args.before is None else normalize_rfc3339(args.before, what="--before")
    found = read_database(load_config(args).db_path, lambda conn: session_reads.list_sessions(
        conn, user_id=args.user, agent_id=args.agent, limit=args.limit, before=before))
    if args.json:
        print_json({"sessions": [dataclasses.asdict(info) for info in found]})
        return 0
    for info in found:
        owner = info.user_id or "-"
        if info.agent_id:
            owner += f"/{info.agent_id}"
        print(printable(f"{info.last_active_at}  {info.message_count:>6} msgs  {owner:<24} "
                        f"{info.session_id}", one_line=True))
    if not found:
        print("no sessions")
    return 0
