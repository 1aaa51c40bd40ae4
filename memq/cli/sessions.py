"""``memq sessions``: sessions by last activity, with their owner and message count."""

from __future__ import annotations

import argparse
import dataclasses
from typing import TYPE_CHECKING, Any

from memq import tenants
from memq.cli.common import (
    add_store_options,
    integer_in,
    load_config,
    print_json,
    read_database,
)
from memq.printable import printable

if TYPE_CHECKING:
    from memq.store.read.sessions import SessionInfo


def register(sub: Any) -> None:
    parser = sub.add_parser("sessions", help="sessions, most recently active first")
    parser.add_argument("--user", help="only this user's sessions")
    parser.add_argument("--agent", help="only this agent's sessions")
    parser.add_argument("--tenant", metavar="T",
                        help="only this tenant's sessions, shown in its names (--user and "
                             "--agent are its names too)")
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

    tenant = None if args.tenant is None else tenants.check_name(args.tenant, "--tenant")
    named: dict[str, str | None] = {}
    for what, value in (("--user", args.user), ("--agent", args.agent)):
        if value is not None:
            check_identifier(what, value)
        named[what] = value if value is None or tenant is None else tenants.inside(tenant, value)
    before = None if args.before is None else normalize_rfc3339(args.before, what="--before")
    found = read_database(load_config(args).db_path, lambda conn: session_reads.list_sessions(
        conn, user_id=named["--user"], agent_id=named["--agent"], limit=args.limit,
        before=before, tenant=tenant))
    if tenant is not None:
        found = [_in_tenant(info) for info in found]
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


def _in_tenant(info: SessionInfo) -> SessionInfo:
    """A tenant's session in its own names (its global user shown as none)."""
    def name(stored: str | None) -> str | None:
        return None if stored is None else tenants.split(stored)[1] or None
    return dataclasses.replace(info, session_id=tenants.split(info.session_id)[1],
                               user_id=name(info.user_id), agent_id=name(info.agent_id))
