"""``memq keys create|list|revoke``: the person's API keys for ``memq serve``.

A key reaches only the users and agents it names and does only what it ``--can``; its
secret is printed once, by ``create``, and kept nowhere. Admin credentials (the person's),
as every command that grants something.
"""

from __future__ import annotations

import argparse
import dataclasses
import re
from datetime import UTC, datetime, timedelta
from typing import Any

from memq import tenants
from memq.cli.common import (
    add_store_options,
    add_wait_option,
    integer_in,
    load_config,
    person,
    print_json,
    read_database,
    wait_committed,
)
from memq.printable import printable

UNITS = {"m": 60, "h": 3600, "d": 86400}
DURATION = re.compile(r"([1-9][0-9]{0,5})([mhd])")


def register(sub: Any) -> None:
    parser = sub.add_parser("keys", help="API keys for memq serve: create, list, revoke")
    verbs = parser.add_subparsers(dest="verb", metavar="VERB", required=True)
    _register_create(verbs)
    listing = verbs.add_parser("list", help="every key, never a secret")
    listing.add_argument("--json", action="store_true", help="one JSON object")
    add_store_options(listing)
    listing.set_defaults(func=list_keys)
    revoke = verbs.add_parser("revoke", help="revoke keys: refused everywhere within 1 s")
    revoke.add_argument("key_ids", nargs="+", metavar="ID")
    add_wait_option(revoke)
    add_store_options(revoke)
    revoke.set_defaults(func=revoke_keys)
    audit = sub.add_parser("audit", help="what was sent through API keys: by key, by user")
    audit.add_argument("--key", metavar="ID", help="only this key's")
    audit.add_argument("--user", metavar="USER", help="only what reached this user")
    audit.add_argument("--limit", type=integer_in("number of events", 1, 1_000_000),
                       default=100, help="newest N (default 100)")
    audit.add_argument("--json", action="store_true", help="one JSON object")
    add_store_options(audit)
    audit.set_defaults(func=show_audit)


def _register_create(verbs: Any) -> None:
    create = verbs.add_parser("create", help="mint a key; prints its secret once")
    create.add_argument("name", help="what the key is for (shown in lists)")
    create.add_argument("--tenant", default=tenants.DEFAULT, metavar="T",
                        help="the tenant whose users the key reaches: a namespace of its "
                             f"own, made by naming it (default {tenants.DEFAULT!r})")
    who = create.add_mutually_exclusive_group(required=True)
    who.add_argument("--user", action="append", dest="users", metavar="USER",
                     help="a user the key reaches (repeatable)")
    who.add_argument("--all-users", action="store_true", help="every user")
    create.add_argument("--agent", action="append", dest="agents", metavar="AGENT",
                        help="an agent the key reaches (repeatable; default: every agent)")
    create.add_argument("--can", type=_rights, default=["read", "write"],
                        help="what it may do: read,write,forget,delegate (default read,write)")
    create.add_argument("--expires", type=_duration, metavar="DURATION",
                        help="lifetime, e.g. 30d, 12h, 15m (default: until revoked)")
    create.add_argument("--units-per-s", type=int, metavar="N",
                        help="its budget per second (default [limits] key_units_per_s)")
    create.add_argument("--concurrent", type=int, metavar="N",
                        help="its calls at once (default [limits] key_concurrent)")
    create.add_argument("--json", action="store_true", help="one JSON object")
    add_wait_option(create)
    add_store_options(create)
    create.set_defaults(func=create_key)


def _rights(text: str) -> list[str]:
    return [part.strip() for part in text.split(",") if part.strip()]


def _duration(text: str) -> timedelta:
    match = DURATION.fullmatch(text.strip())
    if match is None:
        raise argparse.ArgumentTypeError(f"{text!r} is not a duration like 30d, 12h or 15m")
    return timedelta(seconds=int(match.group(1)) * UNITS[match.group(2)])


def create_key(args: argparse.Namespace) -> int:
    expires = None if args.expires is None else datetime.now(UTC) + args.expires
    with person(args) as client:
        made = client.create_key(args.name, users=None if args.all_users else args.users,
                                 agents=args.agents, can=args.can, expires_at=expires,
                                 units_per_s=args.units_per_s, concurrent=args.concurrent,
                                 tenant=args.tenant)
        wait_committed(client, args.wait)
    if args.json:
        print_json(dataclasses.asdict(made))
    else:
        print(f"key {made.id} created; its secret, shown this once:\n{made.secret}")
    return 0


def list_keys(args: argparse.Namespace) -> int:
    with person(args) as client:
        found = client.api_keys()
    if args.json:
        print_json({"keys": [dataclasses.asdict(key) for key in found]})
        return 0
    for key in found:
        users = "every user" if key.users is None else ", ".join(key.users)
        agents = "" if key.agents is None else f"; agents {', '.join(key.agents)}"
        state = (f"revoked {key.revoked_at}" if key.revoked_at
                 else f"expires {key.expires_at}" if key.expires_at else "no expiry")
        print(f"{key.id}  {key.name}  tenant {key.tenant}: {users}{agents}; "
              f"can {','.join(key.rights)}; {state}")
    if not found:
        print("no key yet: memq keys create NAME --user USER")
    return 0


def revoke_keys(args: argparse.Namespace) -> int:
    with person(args) as client:
        for key_id in args.key_ids:
            client.revoke_key(key_id)
        wait_committed(client, args.wait)
    for key_id in args.key_ids:
        print(f"revoked: {key_id}")
    return 0


def show_audit(args: argparse.Namespace) -> int:
    from memq.store.read.audit import audit

    found = read_database(load_config(args).db_path, lambda conn: audit(
        conn, key_id=args.key, user_id=args.user, limit=args.limit))
    if args.json:
        print_json({"events": [dataclasses.asdict(entry) for entry in found]})
        return 0
    for entry in found:
        who = f"{entry.key_id} ({entry.key_name})" if entry.key_name else entry.key_id
        what = entry.type + (" [forgotten since]" if entry.erased else "")
        print(printable(f"{entry.recorded_at}  {who}  {what}  user {entry.user_id or '-'}  "
                        f"session {entry.session_id or '-'}", one_line=True))
    if not found:
        print("nothing sent through a key yet")
    return 0
