"""Reading scheduled tasks: the ``scheduled_tasks`` projection."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import apsw

TASK_COLUMNS = ("id, name, original_schedule, cron_expr, prompt, source, is_oneshot, is_paused, "
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


_BY_ID = f"SELECT {TASK_COLUMNS} FROM scheduled_tasks WHERE id = ?"
_ALL = f"""SELECT {TASK_COLUMNS} FROM scheduled_tasks
    ORDER BY next_run_at IS NULL, next_run_at, name, id"""


def task(conn: apsw.Connection, task_id: str) -> Task | None:
    """One task, or None if there is none with that id."""
    row = conn.execute(_BY_ID, (task_id,)).fetchone()
    return None if row is None else Task.from_row(row)


def tasks(conn: apsw.Connection) -> list[Task]:
    """Every task, by next run (paused ones last), then name."""
    return [Task.from_row(row) for row in conn.execute(_ALL)]
