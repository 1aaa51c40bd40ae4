"""Scheduled tasks from the agent side: schedule, pause, resume, delete, list.

The schedule text is parsed here (a pure function), so a schedule memq cannot read is an
error raised to the caller at once and nothing is sent. The writer computes the next run
from the event, and keeps one pending run per active task in rq-scheduler.

Read-your-writes: like every write, ``schedule_task`` returns before the writer has
committed, while ``pause_task`` / ``resume_task`` / ``delete_task`` / ``tasks`` look at
committed state. Call ``flush()`` between scheduling a task and acting on it, or its id
is not found yet.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import apsw

from memq.clock import now_utc, to_rfc3339, uuid7
from memq.errors import NotFound, ScheduleError, ValidationError
from memq.events import EventType, check_identifier
from memq.schedule import parse_schedule

if TYPE_CHECKING:
    from memq.config import Config
    from store.reader import ReadPool

_COLUMNS = ("id, name, original_schedule, cron_expr, prompt, source, is_oneshot, is_paused, "
            "is_trusted, tz, next_run_at, last_run_at, created_at, updated_at")


@dataclass(frozen=True)
class Task:
    """One scheduled task as the writer last committed it; times are UTC RFC3339."""

    id: str
    name: str
    schedule: str
    cron_expr: str
    prompt: str
    source: str
    is_oneshot: bool
    is_paused: bool
    is_trusted: bool
    tz: str
    next_run_at: str | None
    last_run_at: str | None
    created_at: str
    updated_at: str

    @classmethod
    def from_row(cls, row: tuple[Any, ...]) -> Task:
        values = list(row)
        for flag in (6, 7, 8):
            values[flag] = bool(values[flag])
        return cls(*values)


class TasksMixin:
    """Scheduled-task methods of :class:`~producers.client.MemoryClient`."""

    if TYPE_CHECKING:
        config: Config
        readers: ReadPool

        def _send(self, etype: str, payload: dict[str, Any], *,
                  session_id: str | None = None, created_at: str | None = None) -> str: ...

    def schedule_task(self, name: str, schedule: str, prompt: str, *, oneshot: bool = False,
                      trusted: bool = False, tz: str | None = None) -> str:
        """Schedule ``prompt`` to reach the agents on ``schedule``; returns the task id.

        ``schedule`` is cron or plain English ("weekdays at 8:30am", "in 2 hours"); it is
        read in ``tz`` (default: ``[scheduler] tz``). A one-time schedule makes a one-shot
        whatever ``oneshot`` says; ``oneshot=True`` with a repeating one is an error.
        ``trusted`` tasks' commands skip terminal approval.
        """
        check_identifier("name", name)
        _text("schedule", schedule)
        _text("prompt", prompt)
        _flag("oneshot", oneshot)
        _flag("trusted", trusted)
        zone = self.config.scheduler.tz if tz is None else _text("tz", tz)
        now = now_utc()
        parsed = parse_schedule(schedule, now=now, tz=zone)
        if oneshot and not parsed.is_oneshot:
            raise ScheduleError(
                f"oneshot=True needs a one-time schedule such as 'in 2 hours' or 'tomorrow at"
                f" 9am', but {schedule!r} repeats ({parsed.cron_expr})")
        task_id = uuid7()
        payload = {
            "task_id": task_id, "name": name, "schedule": schedule,
            "cron_expr": parsed.cron_expr, "prompt": prompt, "oneshot": parsed.is_oneshot,
            "trusted": trusted, "tz": zone, "source": "tool",
            "run_at": None if parsed.run_at is None else to_rfc3339(parsed.run_at),
        }
        # The writer computes the first run from created_at: the same `now` as the parse.
        self._send(EventType.TASK_SCHEDULED, payload, created_at=to_rfc3339(now))
        return task_id

    def pause_task(self, task_id: str) -> None:
        """Stop a task from firing until resumed; :class:`NotFound` for an unknown id."""
        self.task(task_id)
        self._send(EventType.TASK_CHANGED, {"task_id": task_id, "paused": True})

    def resume_task(self, task_id: str) -> None:
        """Let a paused task fire again; its next run is computed from now."""
        self.task(task_id)
        self._send(EventType.TASK_CHANGED, {"task_id": task_id, "paused": False})

    def delete_task(self, task_id: str) -> None:
        """Delete a task and its pending run; :class:`NotFound` for an unknown id."""
        self.task(task_id)
        self._send(EventType.TASK_DELETED, {"task_id": task_id})

    def task(self, task_id: str) -> Task:
        """One committed task; :class:`NotFound` if there is none with that id."""
        check_identifier("task_id", task_id)
        with self.readers.connection() as conn:
            row = conn.execute(f"SELECT {_COLUMNS} FROM scheduled_tasks WHERE id = ?",
                               (task_id,)).fetchone()
        if row is None:
            raise NotFound(f"no scheduled task {task_id!r} (a task scheduled a moment ago "
                           "is found once the writer has committed it: see flush())")
        return Task.from_row(row)

    def tasks(self) -> list[Task]:
        """Every committed task, by next run (paused ones last), then name."""
        with self.readers.connection() as conn:
            return read_tasks(conn)


def read_tasks(conn: apsw.Connection) -> list[Task]:
    """Every task in the database behind ``conn``, by next run (paused last), then name."""
    rows = conn.execute(f"""SELECT {_COLUMNS} FROM scheduled_tasks
                            ORDER BY next_run_at IS NULL, next_run_at, name, id""").fetchall()
    return [Task.from_row(row) for row in rows]


def _text(what: str, value: Any) -> str:
    if not isinstance(value, str):
        raise ValidationError(f"{what} must be a string, got {type(value).__name__}")
    if not value.strip():
        raise ValidationError(f"{what} must not be empty")
    return value


def _flag(what: str, value: Any) -> None:
    if not isinstance(value, bool):
        raise ValidationError(f"{what} must be True or False, got {value!r:.60}")
