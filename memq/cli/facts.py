"""``memq facts list|history|set|delete``: what the agents and the user have recorded.

``list`` and ``history`` read the database. ``set`` and ``delete`` act for the person, with
the admin's credentials: what the person sets is the user's own (``source = user``, which
agents can neither overwrite nor delete, and which only admin may send), unless
``--as-agent``. ``--user U`` is whose fact it is, as for ``list`` (default: a global one).
"""

from __future__ import annotations

import argparse
import dataclasses
from typing import Any

from memq import authority
from memq.cli.common import (
    add_store_options,
    add_wait_option,
    load_config,
    person,
    print_json,
    read_database,
    wait_committed,
)
from memq.errors import NotFound
from memq.events.vocabulary import EventType
from memq.printable import printable


def register(sub: Any) -> None:
    facts = sub.add_parser("facts", help="facts and their history")
    fsub = facts.add_subparsers(dest="action", metavar="ACTION", required=True)
    parser = fsub.add_parser("list", help="current facts, by category and key")
    add_store_options(parser, redis=False)
    parser.add_argument("--category", help="only this category")
    parser.add_argument("--user", help="also this user's facts (default: global ones only)")
    parser.add_argument("--json", action="store_true", help="one JSON object")
    parser.set_defaults(func=list_facts)
    parser = fsub.add_parser("history", help="every change of one fact, oldest first")
    add_store_options(parser, redis=False)
    parser.add_argument("category")
    parser.add_argument("key")
    parser.add_argument("--user", help="this user's fact (default: the global one)")
    parser.add_argument("--json", action="store_true", help="one JSON object")
    parser.set_defaults(func=history)
    parser = fsub.add_parser("set", help="set a fact as the user's own (protected from agents)")
    parser.add_argument("category")
    parser.add_argument("key")
    parser.add_argument("value")
    parser.add_argument("--as-agent", action="store_true",
                        help="an agent's fact, not protected (the user's value stays)")
    parser.add_argument("--force", action="store_true",
                        help="with --as-agent: over the user's value all the same (a forced "
                             "value is the person's: stored as the user's, protected)")
    _add_change_options(parser)
    parser.set_defaults(func=set_fact)
    parser = fsub.add_parser("delete", help="delete a fact's value, the user's own too (its "
                                            "history stays)")
    parser.add_argument("category")
    parser.add_argument("key")
    _add_change_options(parser)
    parser.set_defaults(func=delete_fact)


def _add_change_options(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--user", metavar="U", help="this user's fact (default: a global one)")
    add_wait_option(parser)
    add_store_options(parser)


def set_fact(args: argparse.Namespace) -> int:
    source = "agent" if args.as_agent and not args.force else "user"
    with person(args) as client:
        client.set_fact(args.category, args.key, args.value, source=source, force=args.force,
                        user_id=args.user)
        wait_committed(client, args.wait)
    print(f"set {_named(args)} = {args.value!r} [{source}]")
    return 0


def delete_fact(args: argparse.Namespace) -> int:
    with person(args) as client:
        authority.check(client.role, EventType.FACT_DELETED, {"source": "user"})
        current = {(f.key, f.user_id) for f in client.facts(args.category, user_id=args.user)}
        if (args.key, args.user) not in current:
            # Deleting nothing would be an event that changes nothing: "deleted" would say
            # otherwise, and a mistyped key would go unnoticed.
            raise NotFound(f"no fact {printable(_named(args), one_line=True)}: nothing to "
                           "delete (memq facts list shows the facts)")
        client.delete_fact(args.category, args.key, source="user", user_id=args.user)
        wait_committed(client, args.wait)
    print(f"deleted {_named(args)}")
    return 0


def _named(args: argparse.Namespace) -> str:
    owner = "" if args.user is None else f"{args.user}: "
    return f"{owner}{args.category}/{args.key}"


def list_facts(args: argparse.Namespace) -> int:
    from memq.store.read import facts as fact_reads

    _check_user(args.user)
    facts = read_database(load_config(args).db_path,
                          lambda conn: fact_reads.list_facts(conn, args.category, args.user))
    if args.json:
        print_json({"facts": [dataclasses.asdict(fact) for fact in facts]})
        return 0
    for fact in facts:
        owner = "" if fact.user_id is None else f"{fact.user_id}: "
        print(printable(f"{owner}{fact.category}/{fact.key} = {fact.value!r}  "
                        f"[{fact.source}, updated {fact.updated_at}]", one_line=True))
    if not facts:
        print("no facts" + (f" in category {args.category!r}" if args.category else ""))
    return 0


def history(args: argparse.Namespace) -> int:
    from memq.store.read import facts as fact_reads

    _check_user(args.user)
    changes = read_database(load_config(args).db_path, lambda conn: fact_reads.fact_history(
        conn, args.category, args.key, args.user))
    if args.json:
        print_json({"category": args.category, "key": args.key, "user_id": args.user,
                    "changes": [dataclasses.asdict(change) for change in changes]})
        return 0
    for change in changes:
        what = "deleted" if change.action == "deleted" else f"{change.action} {change.value!r}"
        forced = " (force)" if change.force else ""
        outcome = "" if change.applied else "  not applied: the user's value is protected"
        print(f"{change.created_at}  {change.source}: {what}{forced}{outcome}")
    if not changes:
        print(f"no changes recorded for {args.category}/{args.key}")
    return 0



def _check_user(user: str | None) -> None:
    from memq.events import check_identifier

    if user is not None:
        check_identifier("--user", user)
