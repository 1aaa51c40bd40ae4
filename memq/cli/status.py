"""``memq status [--json]``: the inbox, the writer, the queues, the workers and the database.

Readable at a glance on a terminal, one JSON object with ``--json``. It only reads, and it
reports what it can: Redis down still shows the database, and the other way round (the
exit code is then 1, so the command also serves as a health check). Credentials never
appear: the Redis URL is shown redacted.
"""

from __future__ import annotations

import argparse
import datetime as dt
from typing import Any

import orjson

from memq import broker
from memq.cli.common import add_store_options, load_config
from memq.config import Config
from memq.errors import MemqError
from memq.logs import redact_url


def register(sub: Any) -> None:
    parser = sub.add_parser(
        "status", help="inbox, writer, queues, workers and database at a glance")
    add_store_options(parser)
    parser.add_argument("--json", action="store_true", help="print one JSON object")
    parser.set_defaults(func=show_status)


def show_status(args: argparse.Namespace) -> int:
    report = collect(load_config(args))
    if args.json:
        print(orjson.dumps(report, option=orjson.OPT_INDENT_2).decode())
    else:
        print(render(report))
    healthy = report["redis"]["ok"] and report["database"]["ok"]
    return 0 if healthy else 1


def collect(config: Config) -> dict[str, Any]:
    """Everything ``status`` shows, as plain JSON-able data."""
    from store import status as store_status  # the CLI alone may import the roles
    from workers import status as job_status

    report: dict[str, Any] = {
        "redis": {"url": redact_url(config.redis_url), "ok": False},
        "database": {"path": config.db_path, "ok": False},
    }
    try:
        client = broker.connect(config.redis_url, timeout_s=5.0)
        with broker.translated(config.redis_url, "reading the status"):
            client.ping()
            report["inbox"] = store_status.inbox(client)
            report["writer"] = store_status.writer(client)
            report["queues"] = job_status.queues(client)
            report["workers"] = job_status.workers(client)
            report["scheduler"] = job_status.scheduler(client)
        report["redis"]["ok"] = True
    except MemqError as exc:
        report["redis"]["error"] = str(exc)
    try:
        report["database"] = {**store_status.database(config.db_path), "ok": True}
    except MemqError as exc:
        report["database"]["error"] = str(exc)
    return report


# -- the table ----------------------------------------------------------------------------


def render(report: dict[str, Any]) -> str:
    lines = [f"redis     {report['redis']['url']}"]
    if report["redis"]["ok"]:
        lines += _redis_lines(report)
    else:
        lines.append(f"          unreachable: {report['redis']['error']}")
    lines.append("")
    database = report["database"]
    lines.append(f"database  {database['path']}")
    if database["ok"]:
        lines += _database_lines(database)
    else:
        lines.append(f"          unreadable: {database['error']}")
    return "\n".join(lines)


def _redis_lines(report: dict[str, Any]) -> list[str]:
    inbox, writer = report["inbox"], report["writer"]
    oldest = inbox["oldest_age_s"]
    lines = [
        f"inbox     {inbox['length']} entries: {inbox['lag']} unread, "
        f"{inbox['pending']} being applied"
        + (f"; oldest {oldest:.1f} s old" if oldest is not None else ""),
        "writer    " + (f"alive (heartbeat {writer['heartbeat']})" if writer["alive"]
                        else "NOT SEEN in the last 60 s (is `memq writer` running?)"),
        *([f"          STALLED since {writer['stalled']}"] if writer.get("stalled") else []),
        f"          {writer['batches']} batches, {writer['events_applied']} events applied, "
        f"{writer['events_rejected']} rejected; last batch {writer['last_batch_size']} "
        f"entries in {writer['last_apply_ms']} ms, lag {writer['last_lag_ms']} ms",
        "",
        f"{'queue':<18}{'queued':>8}{'started':>9}{'failed':>8}{'retrying':>10}"
        f"{'finished':>10}{'workers':>9}",
    ]
    for name, counts in report["queues"].items():
        serving = sum(1 for w in report["workers"] if name in w["queues"])
        lines.append(
            f"{name:<18}{counts['queued']:>8}{counts['started']:>9}{counts['failed']:>8}"
            f"{counts['scheduled']:>10}{counts['finished']:>10}{serving:>9}")
    for w in report["workers"]:
        job = f", job {w['current_job']}" if w["current_job"] else ""
        lines.append(f"  worker {w['name']} ({w['state']}{job}) pid {w['pid']} "
                     f"on {w['hostname']}: {', '.join(w['queues'])}")
    scheduler = report["scheduler"]
    due = _when(scheduler["next_at"])
    lines.append(f"scheduler {scheduler['scheduled_jobs']} runs pending"
                 + (f", next at {due}" if due else ""))
    return lines


def _database_lines(database: dict[str, Any]) -> list[str]:
    m = database["messages"]
    lines = [
        f"          {_bytes(database['size_bytes'])}, WAL {_bytes(database['wal_bytes'])}; "
        f"{database['events']} events",
        f"messages  {m['total']} in {database['sessions']} sessions: {m['embedded']} embedded, "
        f"{m['pending']} pending, {m['failed']} failed, {m['empty']} empty",
        f"rejected  {database['rejected']} events set aside"
        + (" (see `memq rejected list`)" if database["rejected"] else ""),
        f"facts     {database['facts']}",
        f"tasks     {database['tasks']}" + (", due next:" if database["tasks_due"] else ""),
    ]
    for task in database["tasks_due"]:
        lines.append(f"          {task['next_run_at']}  {task['name']}  ({task['schedule']})")
    return lines


def _bytes(size: int) -> str:
    value = float(size)
    for unit in ("B", "KB", "MB", "GB"):
        if value < 1024 or unit == "GB":
            return f"{value:.0f} {unit}" if unit == "B" else f"{value:.1f} {unit}"
        value /= 1024
    return f"{value:.1f} GB"


def _when(unix_s: float | None) -> str:
    if unix_s is None:
        return ""
    return dt.datetime.fromtimestamp(unix_s, dt.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
