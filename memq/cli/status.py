"""``memq status [--json]``: the inbox, the writer, the queues, the workers and the database.

Readable at a glance on a terminal, one JSON object with ``--json``. It only reads, and it
reports what it can: Redis down still shows the database, and the other way round. The exit
code serves as a health check: 0 healthy, 1 when Redis or the database cannot be read (or
belong to two databases), 3 when both answer but no writer is running. Credentials never
appear: the Redis URL is shown redacted.
"""

from __future__ import annotations

import argparse
import dataclasses
import datetime as dt
from typing import Any

from memq import acl, broker, identity
from memq.cli.common import add_store_options, load_config, print_json
from memq.config import Config
from memq.errors import MemqError, PermissionDenied
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
        print_json(report)
    else:
        print(render(report))
    return health_code(report)


NO_WRITER = 3
"""The exit code when Redis and the database answer but no writer has beaten its heart
within a minute: nothing sent is being committed."""


def health_code(report: dict[str, Any]) -> int:
    """0 healthy; 1 Redis or the database unreadable, or bound to two databases;
    :data:`NO_WRITER` when only the writer is missing (for scripts and probes)."""
    readable = report["redis"]["ok"] and report["database"]["ok"]
    if not readable or report["binding"]["ok"] is False:
        return 1
    return 0 if report.get("writer", {}).get("alive") else NO_WRITER


def collect(config: Config) -> dict[str, Any]:
    """Everything ``status`` shows, as plain JSON-able data."""
    from memq.store.read import status as store_status  # the CLI alone may import the roles
    from memq.workers import status as job_status

    report: dict[str, Any] = {
        "redis": {"url": redact_url(config.redis_url), "ok": False},
        "database": {"path": config.db_path, "ok": False},
    }
    try:
        client = broker.client_for(config, timeout_s=5.0)
        report["redis"]["sentinel"] = broker.sentinel_view(config)
        with broker.translated(config.redis_url, "reading the status"):
            client.ping()
            report["trust"] = acl.trust(client)
            report["inbox"] = store_status.inbox(client)
            report["writer"] = store_status.writer(client)
            report["queues"] = job_status.queues(client)
            report["workers"] = job_status.workers(client)
            report["scheduler"] = job_status.scheduler(client)
            claim = identity.current(client)
        report["redis"]["ok"] = True
        report["redis"]["belongs_to"] = None if claim is None else dataclasses.asdict(claim)
    except MemqError as exc:
        report["redis"]["error"] = str(exc)
        report["redis"]["refused"] = isinstance(exc, PermissionDenied)
    try:
        report["database"] = {
            **store_status.database(config.db_path, config.embed.model_name), "ok": True}
    except MemqError as exc:
        report["database"]["error"] = str(exc)
    report["model"] = _model(config)
    report["binding"] = _binding(report)
    return report


def _binding(report: dict[str, Any]) -> dict[str, Any]:
    """Whether the database read here is the one this Redis belongs to (memq/identity.py):
    ``ok`` True or False, None while either side cannot tell."""
    claim, ours = report["redis"].get("belongs_to"), report["database"].get("id")
    theirs = None if claim is None else claim["database_id"]
    ok = None if theirs is None or not report["database"]["ok"] else theirs == ours
    return {"ok": ok, "database_id": ours, "redis_database_id": theirs}


def _model(config: Config) -> dict[str, Any]:
    """Whether this machine has the embedding model's files (workers and queries need them).

    Not part of the health verdict: a machine that only runs the writer needs no model."""
    from memq.model_files import missing

    absent = missing(config.embed.model_dir)
    return {"name": config.embed.model_name, "dir": config.embed.model_dir,
            "ok": not absent, "missing": absent}


# -- the table ----------------------------------------------------------------------------


def render(report: dict[str, Any]) -> str:
    lines = [f"redis     {report['redis']['url']}"]
    if sentinel := report["redis"].get("sentinel"):
        lines.append(f"          master {sentinel['master']} of {sentinel['service']!r} with "
                     f"{sentinel['replicas']} replica(s), named by the sentinels "
                     f"{', '.join(sentinel['sentinels'])}")
    if report["redis"]["ok"]:
        lines += _redis_lines(report)
    else:
        how = "refused" if report["redis"].get("refused") else "unreachable"
        lines.append(f"          {how}: {report['redis']['error']}")
    lines.append("")
    database = report["database"]
    lines.append(f"database  {database['path']}")
    if database["ok"]:
        lines += _database_lines(database)
    else:
        lines.append(f"          unreadable: {database['error']}")
    lines += _binding_lines(report)
    lines += ["", *_model_lines(report["model"])]
    return "\n".join(lines)


def _binding_lines(report: dict[str, Any]) -> list[str]:
    claim = report["redis"].get("belongs_to")
    if report["binding"]["ok"]:
        return [f"binding   this Redis belongs to this database ({claim['database_id']})"]
    if report["binding"]["ok"] is None:
        if report["redis"]["ok"] and claim is None:
            return ["binding   no writer has claimed this Redis for a database yet"]
        return []
    return [f"binding   MISMATCH: this Redis belongs to database {claim['database_id']} "
            f"({claim['path']} on {claim['host']}), not to this one "
            f"({report['binding']['database_id']}): its writer never writes here"]


def _model_lines(model: dict[str, Any]) -> list[str]:
    if model["ok"]:
        return [f"model     {model['name']} in {model['dir']}"]
    return [f"model     MISSING files in {model['dir']}: {', '.join(model['missing'])}",
            f"          embed workers and queries cannot run here: `memq fetch-model "
            f"--model-dir {model['dir']}`, or set [embed] model_dir / MEMQ_EMBED_MODEL_DIR"]


def _trust_line(trust: dict[str, Any]) -> str:
    """Whether this Redis separates agents, workers and the person, in one line."""
    if trust["users"] is None:
        return (f"trust     running as {trust['user']} ({trust['role']}), which may not list "
                "ACL users")
    if trust["one_trust_domain"]:
        return ("trust     one trust domain: this Redis has no memq ACL users, so every client "
                "acts as admin (`memq acl apply` creates them)")
    missing = sorted(set(acl.USERNAMES.values()) - set(trust["users"]))
    return (f"trust     roles enforced by the ACL users {', '.join(trust['users'])}"
            + (f" (missing: {', '.join(missing)})" if missing else "")
            + f"; this command runs as {trust['user']}"
            + ("; but the default user needs no password, so whoever reaches Redis is admin"
               if trust["default_user_open"] else ""))


def _redis_lines(report: dict[str, Any]) -> list[str]:
    inbox, writer = report["inbox"], report["writer"]
    oldest = inbox["oldest_age_s"]
    lines = [
        _trust_line(report["trust"]),
        f"inbox     {inbox['length']} entries: {inbox['lag']} unread, "
        f"{inbox['pending']} being applied"
        + (f", {inbox['kept']} committed and kept for the replica" if inbox.get("kept") else "")
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
        *_backlog_lines(m),
        f"rejected  {database['rejected']} events set aside"
        + (" (see `memq rejected list`)" if database["rejected"] else ""),
        *([f"forgets   {database['erasing']} sessions hidden, still being erased in steps"]
          if database.get("erasing") else []),
        f"facts     {database['facts']}",
        f"tasks     {database['tasks']}" + (", due next:" if database["tasks_due"] else ""),
    ]
    for task in database["tasks_due"]:
        lines.append(f"          {task['next_run_at']}  {task['name']}  ({task['schedule']})")
    return lines


def _backlog_lines(messages: dict[str, Any]) -> list[str]:
    oldest = messages.get("oldest_pending_age_s")
    if oldest is None:
        return []
    return [f"embedding behind: the oldest message waiting for a vector was committed "
            f"{_duration(oldest)} ago (add `memq worker embed` processes, one per core)"]


def _duration(seconds: float) -> str:
    if seconds < 120:
        return f"{seconds:.1f} s"
    if seconds < 7200:
        return f"{seconds / 60:.1f} min"
    return f"{seconds / 3600:.1f} h"


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
