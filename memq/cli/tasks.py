"""``memq scheduler`` and ``memq tasks parse|list``: scheduled tasks from the command line."""

from __future__ import annotations

import argparse
from collections.abc import Callable
from datetime import datetime
from typing import Any
from zoneinfo import ZoneInfo

from memq import broker, logs, names, tenants
from memq.cli.common import (
    add_store_options,
    add_wait_option,
    load_config,
    person,
    positive_seconds,
    print_json,
    read_database,
    wait_committed,
)
from memq.clock import now_utc, to_rfc3339
from memq.events import check_identifier
from memq.printable import printable

NEXT_RUNS = 5
"""How many upcoming runs ``memq tasks parse`` shows."""


def register(sub: Any) -> None:
    parser = sub.add_parser("scheduler", help="move due scheduled runs onto their queues")
    add_store_options(parser)
    parser.add_argument("--interval", type=positive_seconds,
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
    parser.add_argument("--json", action="store_true", help="one JSON object")
    parser.set_defaults(func=list_tasks)
    parser = tsub.add_parser("add", help="schedule a task (--trusted: its commands skip "
                                         "approval; the person's alone)")
    parser.add_argument("name")
    parser.add_argument("schedule", help='cron or plain English, e.g. "weekdays at 9am"')
    parser.add_argument("prompt", help="what the agents receive when it fires")
    parser.add_argument("--trusted", action="store_true",
                        help="its commands run without terminal approval")
    parser.add_argument("--oneshot", action="store_true", help="fire once (a one-time "
                        "schedule such as 'in 2 hours' is a one-shot anyway)")
    parser.add_argument("--tz", help="IANA time zone (default: [scheduler] tz)")
    parser.add_argument("--tenant", default=tenants.DEFAULT, metavar="T",
                        help="the tenant whose task it is: its runs go to a session of that "
                             "tenant, and its keys see it (default: %(default)s)")
    add_wait_option(parser)
    add_store_options(parser)
    parser.set_defaults(func=add_task)
    for action, what in (("pause", "stop a task from firing until resumed"),
                         ("resume", "let a paused task fire again"),
                         ("delete", "delete a task and its pending run")):
        parser = tsub.add_parser(action, help=what)
        parser.add_argument("task_id", metavar="TASK_ID")
        add_wait_option(parser)
        add_store_options(parser)
        parser.set_defaults(func=change_task, change=action)


def add_task(args: argparse.Namespace) -> int:
    check_identifier("name", args.name)
    name = tenants.inside(tenants.check_name(args.tenant, "--tenant"), args.name)
    with person(args) as client:
        task_id = client.schedule_task(name, args.schedule, args.prompt,
                                       oneshot=args.oneshot, trusted=args.trusted, tz=args.tz)
        wait_committed(client, args.wait)
        task = client.task(task_id)
    trusted = ", trusted" if task.is_trusted else ""
    print(printable(f"{task_id}  {_named(task.name)}  ({task.schedule}{trusted}), next run "
                    f"{task.next_run_at}", one_line=True))
    return 0


def change_task(args: argparse.Namespace) -> int:
    with person(args) as client:
        getattr(client, f"{args.change}_task")(args.task_id)
        wait_committed(client, args.wait)
    print(f"{args.change}d {args.task_id}" if args.change != "resume"
          else f"resumed {args.task_id}")
    return 0


def run_scheduler(args: argparse.Namespace) -> int:
    from memq.workers.consolidate import register_periodic
    from memq.workers.scheduler import JSONScheduler

    logs.setup()
    config = load_config(args)
    interval = args.interval or config.scheduler.interval_s
    connection = broker.client_for(config)
    # rq-scheduler has no serializer option, and jobs must stay JSON (and data, not code).
    scheduler = JSONScheduler(queue_name=names.QUEUE_TASKS, connection=connection,
                              interval=interval)
    # Periodic consolidation passes: idempotent, so checked on every tick (FLUSHALL-proof).
    scheduler.registrations.append(lambda s: register_periodic(s, config))
    with broker.translated(config.redis_url, "running the scheduler"):
        scheduler.run(burst=args.burst)
    return 0


def parse(args: argparse.Namespace) -> int:
    from memq.cron import next_runs
    from memq.schedule import parse_schedule

    text = " ".join(args.text)
    tz = load_config(args).scheduler.tz if args.tz is None else args.tz
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
    from memq.store.read.tasks import tasks as read_tasks

    tasks = read_database(load_config(args).db_path, read_tasks)
    if args.json:
        print_json({"tasks": [task.__dict__ for task in tasks]})
        return 0
    for task in tasks:
        flags = [f for f, on in (("paused", task.is_paused), ("oneshot", task.is_oneshot),
                                 ("trusted", task.is_trusted)) if on]
        print(f"{task.id}  {_named(task.name, repr)} [{task.source}]  {task.schedule!r} = "
              f"{task.cron_expr} ({task.tz})  {','.join(flags) or '-'}  "
              f"next: {task.next_run_at or '-'}")
    if not tasks:
        print("no scheduled tasks")
    return 0


def _named(stored: str, show: Callable[[str], str] = str) -> str:
    """A task's name as the person reads it: ``nightly``, or ``acme:nightly`` for a
    tenant's (:mod:`memq.tenants`)."""
    tenant, name = tenants.split(stored)
    return show(name) if tenant == tenants.DEFAULT else f"{tenant}:{show(name)}"
