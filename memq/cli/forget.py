"""``memq forget session|user|message``: erase a session, a user and every session of
theirs, or one message of a session (with the summary built from it).

The person's command (admin credentials: ``admin.url``). It sends one event, waits until
the writer has committed it, truncated its WAL and deleted the RQ jobs that carried the
text, and says what was erased. Forgetting cannot be undone, hence ``--yes``.
"""

from __future__ import annotations

import argparse
from typing import Any

from memq.cli.common import add_store_options, load_config, positive_seconds, print_json

_WHAT = (
    ("session", ["SESSION"], "one session: its messages, summaries, vectors and the payloads "
     "of its events"),
    ("user", ["USER"], "a user: every session of theirs and their facts"),
    ("message", ["SESSION", "MESSAGE_ID"], "one message of a session, and the summary built "
     "from it"),
)


def register(sub: Any) -> None:
    forget = sub.add_parser(
        "forget", help="erase a session, a user or a message, every trace included (cannot "
                       "be undone)")
    fsub = forget.add_subparsers(dest="what", metavar="WHAT", required=True)
    for what, metas, text in _WHAT:
        parser = fsub.add_parser(what, help=text)
        parser.add_argument("target", metavar=metas[0])
        if len(metas) > 1:
            parser.add_argument("message_id", metavar=metas[1])
        parser.add_argument("--yes", action="store_true", help="yes, erase it for good")
        parser.add_argument("--timeout", type=positive_seconds, default=60.0, metavar="SECONDS",
                            help="how long to wait for the writer (default 60)")
        parser.add_argument("--json", action="store_true", help="one JSON object")
        add_store_options(parser)
        parser.set_defaults(func=run_forget)


def run_forget(args: argparse.Namespace) -> int:
    from memq import MemoryClient
    from memq.errors import ValidationError

    target = " ".join(repr(t) for t in (args.target, getattr(args, "message_id", None)) if t)
    if not args.yes:
        raise ValidationError(f"forgetting {args.what} {target} cannot be undone: "
                              "pass --yes to go ahead")
    config = load_config(args)
    with MemoryClient(config=config) as client:
        if args.what == "message":
            event_id = client.forget_message(args.target, args.message_id)
        else:
            forget = client.forget_session if args.what == "session" else client.forget_user
            event_id = forget(args.target)
        outcome = client.wait_forgotten(event_id, timeout=args.timeout)
    if args.json:
        print_json({"forgotten": args.what, "target": args.target,
                    **({"message_id": args.message_id} if args.what == "message" else {}),
                    **outcome})
        return 0
    print(f"forgot {args.what} {target}: {outcome['messages']} message(s), "
          f"{outcome['events']} event(s) erased, {outcome['jobs']} job(s) deleted "
          f"(event {event_id})")
    return 0
