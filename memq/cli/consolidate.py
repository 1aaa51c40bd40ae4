"""``memq consolidate --now``: ask the writer for a consolidation pass right away.

The writer selects the messages that are due and enqueues ``consolidate`` jobs on
memq-consolidate; ``memq worker consolidate`` runs them. The periodic passes come from
rq-scheduler (see ``workers.consolidate.register_periodic``).
"""

from __future__ import annotations

import argparse
from typing import Any

from memq import acl, authority, broker
from memq.cli.common import add_store_options, load_config, non_negative_seconds, number_in
from memq.events import MAX_MIN_AGE_HOURS
from memq.inbox import send_to_inbox


def register(sub: Any) -> None:
    parser = sub.add_parser(
        "consolidate", help="compress old conversation turns into summaries",
        description="Request a consolidation pass: old, unconsolidated messages of each "
                    "session are summarised by `memq worker consolidate`.",
    )
    parser.add_argument("--now", action="store_true", required=True,
                        help="request a pass now (the scheduler requests one periodically)")
    parser.add_argument("--session", help="only this session (default: every session)")
    parser.add_argument("--min-age-hours", metavar="HOURS",
                        type=number_in("number of hours", 0, MAX_MIN_AGE_HOURS),
                        help="consolidate messages older than this "
                             "(default: [consolidation] min_age_hours)")
    parser.add_argument("--wait", type=non_negative_seconds, nargs="?", const=10.0,
                        metavar="SECONDS",
                        help="wait until the writer has planned the pass (default 10 s)")
    add_store_options(parser)
    parser.set_defaults(func=run_consolidate)


def run_consolidate(args: argparse.Namespace) -> int:
    from memq.store.dispatch.consolidation_jobs import wait_planned
    from memq.workers.consolidate import request_event

    config = load_config(args)
    event = request_event(args.min_age_hours, args.session)
    connection = broker.client_for(config)
    with broker.translated(config.redis_url, "sending the consolidation request"):
        role = acl.role_of(connection)
        authority.check(role, event.type, event.payload)
        send_to_inbox(connection, [event.to_json()], authority.STREAM_OF_ROLE[role])
    scope = f"session {args.session}" if args.session else "every session"
    age = ("the writer's [consolidation] min_age_hours" if args.min_age_hours is None
           else f"{args.min_age_hours:g} h")
    print(f"consolidation requested for {scope}, messages older than {age} (event {event.id})")
    if args.wait is not None:
        with broker.translated(config.redis_url, "waiting for the pass to be planned"):
            outcome = wait_planned(connection, event.id, args.wait)
        print(f"the writer planned {outcome['chunks']} chunk(s) and enqueued "
              f"{outcome['enqueued']} consolidate job(s)")
    return 0
