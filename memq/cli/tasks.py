"""``memq scheduler`` and ``memq tasks parse|list``: scheduled tasks from the command line."""

from __future__ import annotations

import argparse
from datetime import datetime
from typing import Any
from zoneinfo import ZoneInfo

import orjson

from memq import broker, logs, names
from memq.cli.common import add_store_options, load_config, read_database
from memq.clock import now_utc, to_rfc3339

NEXT_RUNS = 5
"""How many upcoming runs ``memq tasks parse`` shows."""


def _positive(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a number: {text!r}") from None
    if not value > 0:
        raise argparse.ArgumentTypeError(f"must be positive, got {text}")
    return value


def register(sub: Any) -> None:
    parser = sub.add_parser("scheduler", help="move due scheduled runs onto their queues")
    add_store_options(parser)
    parser.add_argument("--interval", type=_positive,
                        help="seconds between checks (default: [scheduler] interval_s)")
    parser.add_argument("--burst", action="store_true", help="check once, then exit")
    parser.set_defaults(func=run_scheduler)

    tasks = sub.add_parser("tasks", help="scheduled tasks")
    tsub = tasks.add_subparsers(dest="action", metavar="ACTION", required=True)
    parser = tsub.add_parser("parse", help="show the cron expression and next runs of a schedule")
    parser.add_argument("text", nargs="+", help='e.g. "every weekday at 8:30am"')
    parser.add_argument("--tz", help="IANA time zone (default: [scheduler] tz)")
    parser.add_argument("--config", help="path of memq.toml (default: $MEMQ_CONFIG)")
    parser.set_defaults(func=parse)
    parser = tsub.add_parser("list", help="list scheduled tasks")
    add_store_options(parser, redis=False)
    parser.add_argument("--json", action="store_true", help="one JSON object per line")
    parser.set_defaults(func=list_tasks)


def run_scheduler(args: argparse.Namespace) -> int:
    from workers.consolidate import register_periodic
    from workers.scheduler import JSONScheduler

    logs.setup()
    config = load_config(args)
    interval = args.interval or config.scheduler.interval_s
    connection = broker.connect(config.redis_url)
    # rq-scheduler has no serializer option, and jobs must stay JSON (and data, not code).
    scheduler = JSONScheduler(queue_name=names.QUEUE_TASKS, connection=connection,
                              interval=interval)
    # Periodic consolidation passes: idempotent, so checked on every tick (FLUSHALL-proof).
    scheduler.registrations.append(lambda s: register_periodic(s, config))
    with broker.translated(config.redis_url, "running the scheduler"):
        scheduler.run(burst=args.burst)
    return 0


def parse(args: argparse.Namespace) -> int:
    from memq.schedule import parse_schedule
    from store.cron import next_runs

    text = " ".join(args.text)
    tz = args.tz or load_config(args).scheduler.tz
    now = now_utc()
    parsed = parse_schedule(text, now=now, tz=tz)
    zone = ZoneInfo(tz)
    print(f"schedule:  {text}")
    print(f"cron:      {parsed.cron_expr}")
    print(f"time zone: {tz}")
    if parsed.run_at is not None:
        print("one-shot:  runs once, at")
        runs = [parsed.run_at]
    else:
        print("next runs:")
        runs = next_runs(parsed.cron_expr, after=now, tz=tz, count=NEXT_RUNS)
    for moment in runs:
        print(f"  {_local(moment, zone)}  ({to_rfc3339(moment)[:19]}Z)")
    return 0


def _local(moment: datetime, zone: ZoneInfo) -> str:
    return moment.astimezone(zone).strftime("%a %Y-%m-%d %H:%M %Z")


def list_tasks(args: argparse.Namespace) -> int:
    from producers.tasks import read_tasks

    tasks = read_database(load_config(args).db_path, read_tasks)
    for task in tasks:
        if args.json:
            print(orjson.dumps(task.__dict__).decode())
            continue
        flags = [f for f, on in (("paused", task.is_paused), ("oneshot", task.is_oneshot),
                                 ("trusted", task.is_trusted)) if on]
        print(f"{task.id}  {task.name!r} [{task.source}]  {task.schedule!r} = "
              f"{task.cron_expr} ({task.tz})  {','.join(flags) or '-'}  "
              f"next: {task.next_run_at or '-'}")
    if not tasks and not args.json:
        print("no scheduled tasks")
    return 0
