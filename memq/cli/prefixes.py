"""``memq allow`` / ``memq revoke`` / ``memq allowed``: the person's "always allow" approvals.

Approvals are the person's (admin) alone: these commands run with the admin credentials
(``admin.url`` next to the database, or the configured URL) and wait until the writer has
committed the change. With an agent's credentials they fail with PermissionDenied.
"""

from __future__ import annotations

import argparse
import dataclasses
from typing import Any

from memq.cli.common import (
    add_store_options,
    add_wait_option,
    person,
    print_json,
    wait_committed,
)


def register(sub: Any) -> None:
    parser = sub.add_parser("allow", help="always allow commands that start with PREFIX")
    parser.add_argument("prefixes", nargs="+", metavar="PREFIX",
                        help='a command prefix, e.g. "git status"')
    _tenant_option(parser)
    add_wait_option(parser)
    add_store_options(parser)
    parser.set_defaults(func=allow)

    parser = sub.add_parser("revoke", help="withdraw an always-allowed prefix")
    parser.add_argument("prefixes", nargs="+", metavar="PREFIX")
    _tenant_option(parser)
    add_wait_option(parser)
    add_store_options(parser)
    parser.set_defaults(func=revoke)

    parser = sub.add_parser("allowed", help="list the always-allowed prefixes")
    parser.add_argument("--json", action="store_true", help="one JSON object")
    _tenant_option(parser)
    add_store_options(parser)
    parser.set_defaults(func=allowed)


def _tenant_option(parser: Any) -> None:
    parser.add_argument("--tenant", metavar="T",
                        help="the tenant whose approvals these are (default: default)")


def allow(args: argparse.Namespace) -> int:
    with person(args) as client:
        done = [client.allow_prefix(prefix, tenant=args.tenant) for prefix in args.prefixes]
        wait_committed(client, args.wait)
    for prefix in done:
        print(f"allowed: {prefix}")
    return 0


def revoke(args: argparse.Namespace) -> int:
    with person(args) as client:
        done = [client.revoke_prefix(prefix, tenant=args.tenant) for prefix in args.prefixes]
        wait_committed(client, args.wait)
    for prefix in done:
        print(f"revoked: {prefix}")
    return 0


def allowed(args: argparse.Namespace) -> int:
    with person(args) as client:
        prefixes = client.allowed_prefixes(tenant=args.tenant)
    if args.json:
        print_json({"prefixes": [dataclasses.asdict(item) for item in prefixes]})
        return 0
    for item in prefixes:
        since = f", since {item.created_at}" if item.created_at else ""
        print(f"{item.prefix}  ({item.origin}{since})")
    if not prefixes:
        print("no prefix is allowed")
    return 0
