"""``memq writer``: run the single writer until SIGTERM or Ctrl-C."""

from __future__ import annotations

import argparse
from typing import Any

from memq import broker, logs
from memq.cli.common import add_store_options, latency_first, load_config
from memq.signals import stop_on_signals


def register(sub: Any) -> None:
    parser = sub.add_parser("writer", help="run the single writer of the database")
    add_store_options(parser)
    parser.add_argument(
        "--rebind", action="store_true",
        help="bind this Redis to this database although another database claimed it (only "
             "when that one is gone for good: what the inbox still holds is applied here)")
    parser.set_defaults(func=run_writer)


def run_writer(args: argparse.Namespace) -> int:
    from memq.store.write.service import open_writer  # the CLI alone may import the roles

    logs.setup()
    latency_first()
    config = load_config(args)
    # No silent retries inside redis-py: the writer must see every broken connection, as
    # it then re-reads entries whose delivery reply may have been lost (store.inbox).
    # SIGTERM finishes the batch in hand, acknowledges it, and exits 0; taken before the
    # database is opened, so a stop sent as soon as it exists still ends in exit 0.
    stop = stop_on_signals()
    writer = open_writer(config, broker.client_for(config, retries=0),
                         rebind=args.rebind)
    try:
        writer.run(stop)
    finally:
        writer.close()
    return 0
