"""``memq webhooks add|list|remove|deliveries|run``: the person's webhooks.

``add`` prints the webhook's signing secret once; ``run`` is the dispatcher (one per
database, beside the writer: ``memq up`` starts it), and ``memq worker webhooks`` the
workers that deliver, as many as wanted, on any host.
"""

from __future__ import annotations

import argparse
import dataclasses
from pathlib import Path
from typing import Any

from memq.cli.common import (
    add_store_options,
    add_wait_option,
    load_config,
    person,
    print_json,
    wait_committed,
)
from memq.printable import printable


def register(sub: Any) -> None:
    parser = sub.add_parser("webhooks", help="changes POSTed to URLs: add, list, remove")
    verbs = parser.add_subparsers(dest="verb", metavar="VERB", required=True)
    add = verbs.add_parser("add", help="send a URL the changes of these types; prints its "
                                       "secret once")
    add.add_argument("url")
    add.add_argument("--events", required=True, metavar="TYPES",
                     help="event types or patterns, comma-separated: 'fact.*,message.appended'")
    add.add_argument("--user", metavar="USER", help="only this user's changes")
    add.add_argument("--tenant", metavar="T",
                     help="only this tenant's changes, in its own names (--user is one)")
    add.add_argument("--json", action="store_true", help="one JSON object")
    add_wait_option(add)
    add_store_options(add)
    add.set_defaults(func=add_webhook)
    listing = verbs.add_parser("list", help="every webhook, never a secret")
    listing.add_argument("--json", action="store_true", help="one JSON object")
    add_store_options(listing)
    listing.set_defaults(func=list_webhooks)
    remove = verbs.add_parser("remove", help="stop a webhook's deliveries")
    remove.add_argument("webhook_id", metavar="ID")
    add_wait_option(remove)
    add_store_options(remove)
    remove.set_defaults(func=remove_webhook)
    _register_more(verbs)


def _register_more(verbs: Any) -> None:
    outcomes = verbs.add_parser("deliveries", help="a webhook's latest deliveries")
    outcomes.add_argument("webhook_id", metavar="ID")
    outcomes.add_argument("--json", action="store_true", help="one JSON object")
    add_store_options(outcomes)
    outcomes.set_defaults(func=show_deliveries)
    run = verbs.add_parser("run", help="the dispatcher: hands each webhook its changes")
    add_store_options(run)
    run.set_defaults(func=run_dispatcher)


def add_webhook(args: argparse.Namespace) -> int:
    types = [t.strip() for t in args.events.split(",") if t.strip()]
    with person(args) as client:
        made = client.add_webhook(args.url, types=types, user_id=args.user,
                                  tenant=args.tenant)
        wait_committed(client, args.wait)
    if args.json:
        print_json(dataclasses.asdict(made))
    else:
        print(f"webhook {made.id} added; its signing secret, shown this once:\n{made.secret}")
    return 0


def list_webhooks(args: argparse.Namespace) -> int:
    with person(args) as client:
        found = client.webhooks()
    if args.json:
        print_json({"webhooks": [dataclasses.asdict(h) for h in found]})
        return 0
    for hook in found:
        whose = "" if hook.user_id is None else f"; user {hook.user_id}"
        whose += "" if hook.tenant is None else f"; tenant {hook.tenant}"
        state = f"removed {hook.removed_at}" if hook.removed_at else "active"
        print(printable(f"{hook.id}  {hook.url}  {','.join(hook.types)}{whose}; {state}",
                        one_line=True))
    if not found:
        print("no webhook yet: memq webhooks add URL --events 'fact.*'")
    return 0


def remove_webhook(args: argparse.Namespace) -> int:
    with person(args) as client:
        client.remove_webhook(args.webhook_id)
        wait_committed(client, args.wait)
    print(f"removed: {args.webhook_id}")
    return 0


def show_deliveries(args: argparse.Namespace) -> int:
    from memq import broker
    from memq.store.dispatch.webhooks import outcomes

    found = outcomes(broker.client_for(load_config(args)), args.webhook_id)
    if args.json:
        print_json({"deliveries": found})
        return 0
    for entry in found:
        result = "delivered" if entry.get("ok") else (
            "given up" if entry.get("given_up") else "failed, will retry")
        print(printable(f"{entry['at']}  {entry['delivery']}  attempt {entry['attempt']}  "
                        f"{result}  {entry.get('status') or ''} {entry.get('error') or ''}",
                        one_line=True))
    if not found:
        print("no delivery yet")
    return 0


def run_dispatcher(args: argparse.Namespace) -> int:
    from memq import broker, logs
    from memq.signals import stop_on_signals
    from memq.store.connection import open_connection
    from memq.store.dispatch.webhooks import Dispatcher

    logs.setup()
    config = load_config(args)
    stop = stop_on_signals()
    while not Path(config.db_path).exists():  # started beside a writer that makes it
        if stop.wait(0.5):
            return 0
    conn = open_connection(config.db_path, readonly=True)
    try:
        Dispatcher(conn, broker.client_for(config)).run(stop)
    finally:
        conn.close()
    return 0
