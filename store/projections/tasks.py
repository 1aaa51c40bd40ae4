"""The ``scheduled_tasks`` projection: what runs when, and what ran last.

``next_run_at`` is computed here, from the event alone -- its ``created_at`` (scheduled,
changed, resumed) or its ``fired_at`` (fired) -- never from the wall clock, so a rebuild
gives the same rows. It is UTC RFC3339; the cron expression is read in the task's ``tz``.

* scheduled: a recurring task runs next at the first cron slot after ``created_at``; a
  one-shot at its ``run_at`` (even one already past: a missed one-shot fires once).
* changed: fields given replace the old ones. A new cron, time zone or run time, or a
  resume, computes the next run from the change's ``created_at``. Pausing clears the next
  run of a recurring task; a one-shot keeps its one instant, to be used on resume.
* fired: ``last_run_at`` is set; a one-shot is deleted; a recurring task runs next at the
  first slot after the later of ``fired_at`` and the slot it fired for -- so a run that
  was missed (overdue by many slots) fires once and then continues from now.
* deleted: the row goes.

A fire or delete for a task that no longer exists changes nothing: both race with a
delete legitimately (a run already on its way), and the event stays in the log.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any

import apsw

from memq.clock import parse_rfc3339, to_rfc3339
from memq.cron import first_run, next_run
from memq.errors import InvalidEvent, ScheduleError
from memq.events import TASK_ID, Event, EventType
from memq.schedule import validate_cron, validate_timezone
from memq.store.effects import Effects
from memq.store.projections.base import Applier

COLUMNS = (
    "id, name, cron_expr, original_schedule, prompt, source, is_oneshot, is_paused, "
    "is_trusted, tz, next_run_at, last_run_at, created_at, updated_at"
)
_NAMES = [c.strip() for c in COLUMNS.split(",")]
_FIELD_COLUMNS = {"name": "name", "schedule": "original_schedule", "cron_expr": "cron_expr",
                  "prompt": "prompt", "oneshot": "is_oneshot", "trusted": "is_trusted",
                  "tz": "tz"}


def _timing(cron_expr: str, tz: str, oneshot: bool, run_at: str | None) -> None:
    try:
        validate_cron(cron_expr)
        validate_timezone(tz)
    except ScheduleError as exc:
        raise InvalidEvent(str(exc)) from None
    if oneshot and run_at is None:
        raise InvalidEvent("a one-shot task needs run_at")


def _first_run(row: dict[str, Any], run_at: str | None, after: str) -> str:
    try:
        return first_run(row["cron_expr"], row["tz"], oneshot=bool(row["is_oneshot"]),
                         run_at=run_at, after=after)
    except ScheduleError as exc:  # no run a date can hold (after year 9999)
        raise InvalidEvent(str(exc)) from None


def _next_run(row: dict[str, Any], after: datetime) -> str:
    try:
        return to_rfc3339(next_run(row["cron_expr"], after=after, tz=row["tz"]))
    except ScheduleError as exc:  # no run a date can hold (after year 9999)
        raise InvalidEvent(str(exc)) from None


def _load(cur: apsw.Cursor, task_id: str) -> dict[str, Any] | None:
    cur.execute(f"SELECT {COLUMNS} FROM scheduled_tasks WHERE id = ?", (task_id,))
    row = cur.fetchone()
    if row is None:
        return None
    return dict(zip(_NAMES, row, strict=True))


def _save(cur: apsw.Cursor, row: dict[str, Any]) -> None:
    for column in ("name", "original_schedule", "prompt"):
        if not row[column].strip():
            raise InvalidEvent(f"task {column} must not be empty")
    cur.execute(
        f"INSERT OR REPLACE INTO scheduled_tasks ({COLUMNS}) "
        f"VALUES ({', '.join(':' + n for n in _NAMES)})",
        row,
    )


def apply_scheduled(cur: apsw.Cursor, event: Event, seq: int, effects: Effects) -> None:
    p = event.payload
    if not TASK_ID.fullmatch(p["task_id"]):
        raise InvalidEvent("task_id must be 1-100 letters, digits, '-' or '_'")
    if _load(cur, p["task_id"]) is not None:
        raise InvalidEvent(f"task {p['task_id']} already exists")
    _timing(p["cron_expr"], p["tz"], p["oneshot"], p.get("run_at"))
    row: dict[str, Any] = {"id": p["task_id"], "source": p["source"], "is_paused": 0,
                           "last_run_at": None, "created_at": event.created_at,
                           "updated_at": event.created_at}
    row.update({column: p[field] for field, column in _FIELD_COLUMNS.items()})
    row["next_run_at"] = _first_run(row, p.get("run_at"), event.created_at)
    _save(cur, row)
    effects.tasks_changed.add(p["task_id"])


def apply_changed(cur: apsw.Cursor, event: Event, seq: int, effects: Effects) -> None:
    p = event.payload
    old = _load(cur, p["task_id"])
    if old is None:
        raise InvalidEvent(f"unknown task {p['task_id']}")
    row = {**old, "updated_at": event.created_at}
    row.update({column: p[field] for field, column in _FIELD_COLUMNS.items() if field in p})
    row["is_paused"] = int(p.get("paused", old["is_paused"]))
    retimed = any(row[c] != old[c] for c in ("cron_expr", "tz", "is_oneshot")) or (
        "run_at" in p and row["is_oneshot"])
    if retimed:
        _timing(row["cron_expr"], row["tz"], bool(row["is_oneshot"]), p.get("run_at"))
    resumed = old["is_paused"] and not row["is_paused"]
    if row["is_oneshot"]:
        if retimed:
            row["next_run_at"] = _first_run(row, p["run_at"], event.created_at)
    elif row["is_paused"]:
        row["next_run_at"] = None
    elif retimed or resumed:
        row["next_run_at"] = _first_run(row, None, event.created_at)
    _save(cur, row)
    effects.tasks_changed.add(row["id"])


def apply_fired(cur: apsw.Cursor, event: Event, seq: int, effects: Effects) -> None:
    p = event.payload
    row = _load(cur, p["task_id"])
    if row is None:
        return
    effects.tasks_changed.add(row["id"])
    if row["is_oneshot"]:
        cur.execute("DELETE FROM scheduled_tasks WHERE id = ?", (row["id"],))
        return
    fired_at = parse_rfc3339(p["fired_at"])
    slot = parse_rfc3339(p["scheduled_for"]) if p.get("scheduled_for") else fired_at
    after: datetime = max(fired_at, slot)
    row["last_run_at"] = to_rfc3339(fired_at)
    row["updated_at"] = event.created_at
    if not row["is_paused"]:
        row["next_run_at"] = _next_run(row, after)
    _save(cur, row)


def apply_deleted(cur: apsw.Cursor, event: Event, seq: int, effects: Effects) -> None:
    cur.execute("DELETE FROM scheduled_tasks WHERE id = ?", (event.payload["task_id"],))
    effects.tasks_changed.add(event.payload["task_id"])


def apply_imported(cur: apsw.Cursor, event: Event, seq: int, effects: Effects) -> None:
    """One row of the legacy ``scheduled_tasks`` table, as it was: the schedule, the
    paused and trusted flags, the next and last runs and both times."""
    p = event.payload
    if not TASK_ID.fullmatch(p["task_id"]):
        raise InvalidEvent("task_id must be 1-100 letters, digits, '-' or '_'")
    if _load(cur, p["task_id"]) is not None:
        raise InvalidEvent(f"task {p['task_id']} already exists")
    _timing(p["cron_expr"], p["tz"], oneshot=False, run_at=None)
    row: dict[str, Any] = {"id": p["task_id"], "source": p["source"],
                           "is_paused": int(p["paused"]), "next_run_at": p.get("next_run_at"),
                           "last_run_at": p.get("last_run_at"),
                           "created_at": p["created_at"], "updated_at": p["updated_at"]}
    row.update({column: p[field] for field, column in _FIELD_COLUMNS.items()})
    _save(cur, row)
    effects.tasks_changed.add(p["task_id"])


APPLIERS: dict[str, Applier] = {
    EventType.TASK_SCHEDULED: apply_scheduled,
    EventType.TASK_CHANGED: apply_changed,
    EventType.TASK_FIRED: apply_fired,
    EventType.TASK_DELETED: apply_deleted,
    EventType.TASK_IMPORTED: apply_imported,
}
