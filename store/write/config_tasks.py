"""Tasks from the configuration file, kept in step with it at writer start.

Each ``[[scheduler.tasks]]`` entry is a task with ``source = "config"`` whose id follows
from its name, so "the same task" survives restarts and edits. At start the writer
compares the entries with the config rows and makes the events that close the gap:
``task.scheduled`` for a new entry, ``task.changed`` for an entry whose schedule, prompt,
trusted flag or time zone changed (matched by name), ``task.deleted`` for a row whose entry
is gone. Tasks made through the client (``source = "tool"``) are never looked at. A
config task paused through the client stays paused: the file says what runs, not whether.

The events go into the log through the writer's own transaction (not through the inbox):
the writer reads the rows and writes the events at once, so a repeated or interrupted
start does nothing twice, and a bad entry stops the start with a message naming it.

A schedule is parsed only when an entry is new or changed, so "in 2 hours" in the file
means two hours after the writer first saw it, not after every restart. A one-shot
entry that has already fired (and so was deleted) is not added again while its entry
is unchanged: the log says it ran.
"""

from __future__ import annotations

import logging
import uuid
from dataclasses import dataclass
from datetime import datetime
from typing import Any

import apsw
import orjson

from memq.clock import now_utc, to_rfc3339, uuid7
from memq.config import Config
from memq.errors import ConfigError, ValidationError
from memq.events import Event, EventType, check_payload
from memq.logs import log
from memq.schedule import parse_schedule
from memq.store.write.writer import Writer

logger = logging.getLogger("memq.tasks")

CONFIG_TASK_NAMESPACE = uuid.UUID("0e7d2a4c-93f5-4f0e-9c39-5b3f6f1f7a11")
"""Config task ids are uuid5(this, name): stable across restarts and machines."""


def config_task_id(name: str) -> str:
    return str(uuid.uuid5(CONFIG_TASK_NAMESPACE, name))


@dataclass(frozen=True)
class ConfigTask:
    name: str
    schedule: str
    prompt: str
    oneshot: bool
    trusted: bool
    tz: str

    @classmethod
    def from_entry(cls, entry: dict[str, Any], default_tz: str) -> ConfigTask:
        return cls(entry["name"], entry["schedule"], entry["prompt"],
                   entry.get("oneshot", False), entry.get("trusted", False),
                   entry.get("tz", default_tz))

    @property
    def id(self) -> str:
        return config_task_id(self.name)

    @property
    def where(self) -> str:
        return f"[[scheduler.tasks]] {self.name!r}"

    def same_as(self, payload: dict[str, Any]) -> bool:
        """Whether a stored definition (event payload names) matches this entry."""
        return (payload["schedule"], payload["prompt"], payload["trusted"],
                payload["tz"]) == (self.schedule, self.prompt, self.trusted, self.tz) and (
            payload["oneshot"] or not self.oneshot)


def sync_config_tasks(writer: Writer, *, now: datetime | None = None) -> list[str]:
    """Apply the events that make the config rows match the file; one line per change."""
    config = writer.config
    now = now or now_utc()
    tasks = [ConfigTask.from_entry(e, config.scheduler.tz) for e in config.scheduler.tasks]
    rows = _config_rows(writer.conn)
    events: list[Event] = []
    for task in tasks:
        event = _event_for(writer.conn, config, task, rows.get(task.id), now)
        if event is not None:
            events.append(event)
    wanted = {task.id for task in tasks}
    for task_id, row in sorted(rows.items()):
        if task_id not in wanted:
            events.append(_event(EventType.TASK_DELETED, {"task_id": task_id}, now))
            log(logger, "config task removed", name=row["name"])
    if events:
        writer.apply_local(events)
    return [f"{e.type} {e.payload['task_id']}" for e in events]


def _config_rows(conn: apsw.Connection) -> dict[str, dict[str, Any]]:
    query = """SELECT id, name, original_schedule, prompt, is_oneshot, is_trusted, tz
               FROM scheduled_tasks WHERE source = 'config'"""
    return {
        row[0]: {"name": row[1], "schedule": row[2], "prompt": row[3],
                 "oneshot": bool(row[4]), "trusted": bool(row[5]), "tz": row[6]}
        for row in conn.execute(query)
    }


def _event_for(conn: apsw.Connection, config: Config, task: ConfigTask,
               row: dict[str, Any] | None, now: datetime) -> Event | None:
    if row is not None and task.same_as(row):
        return None
    if row is None and _oneshot_done(conn, task):
        log(logger, "config one-shot already ran; not added again", name=task.name)
        return None
    payload = _payload(task, now)
    if row is None:
        etype, payload["source"] = EventType.TASK_SCHEDULED, "config"
    else:
        etype = EventType.TASK_CHANGED
    try:
        check_payload(etype, payload, config.limits)
    except ValidationError as exc:
        raise ConfigError(f"{task.where}: {str(exc).split(': ', 1)[-1]}") from None
    log(logger, "config task added" if row is None else "config task updated", name=task.name)
    return _event(etype, payload, now)


def _payload(task: ConfigTask, now: datetime) -> dict[str, Any]:
    try:
        parsed = parse_schedule(task.schedule, now=now, tz=task.tz)
    except ValidationError as exc:
        raise ConfigError(f"{task.where}: {exc}") from None
    if task.oneshot and not parsed.is_oneshot:
        raise ConfigError(f"{task.where}: oneshot = true needs a one-time schedule such as "
                          f"'tomorrow at 9am', but {task.schedule!r} repeats")
    return {
        "task_id": task.id, "name": task.name, "schedule": task.schedule,
        "cron_expr": parsed.cron_expr, "prompt": task.prompt, "oneshot": parsed.is_oneshot,
        "trusted": task.trusted, "tz": task.tz,
        "run_at": None if parsed.run_at is None else to_rfc3339(parsed.run_at),
    }


def _event(etype: str, payload: dict[str, Any], now: datetime) -> Event:
    return Event(id=uuid7(), type=etype, session_id=None, created_at=to_rfc3339(now),
                 payload=payload)


def _oneshot_done(conn: apsw.Connection, task: ConfigTask) -> bool:
    """Whether this entry, unchanged, was a one-shot that has fired (newest events first)."""
    rows = conn.execute(
        """SELECT type, payload FROM events
           WHERE type IN ('task.scheduled', 'task.changed', 'task.fired')
             AND json_extract(payload, '$.task_id') = ?
           ORDER BY seq DESC""",
        (task.id,),
    ).fetchall()
    fired = False
    for etype, raw in rows:
        payload = orjson.loads(str(raw))
        if etype == EventType.TASK_FIRED:
            fired = True
        elif "schedule" in payload:
            return fired and bool(payload["oneshot"]) and task.same_as(payload)
    return False
