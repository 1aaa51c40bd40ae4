"""Scheduled tasks from the agent side: schedule, pause, resume, delete, list.

The schedule text is parsed here (a pure function), so a schedule memq cannot read is an
error raised to the caller at once and nothing is sent. The writer computes the next run
from the event, and keeps one pending run per active task in rq-scheduler.

Read-your-writes: like every write, ``schedule_task`` returns before the writer has
committed, and ``task`` / ``tasks`` (so ``pause_task``, ``resume_task``, ``delete_task``)
show this client's own uncommitted schedules, pauses, resumes and deletions over what is
committed (``producers/pending.py``): a task can be paused right after it is scheduled,
without a ``flush()``. Until the writer commits it, such a task's ``next_run_at`` is the
one the writer will compute, and ``created_at`` is the client's clock.
"""

from __future__ import annotations

import dataclasses
from typing import Any

from memq import authority
from memq.clock import now_utc, to_rfc3339, uuid7
from memq.cron import first_run
from memq.errors import NotFound, PermissionDenied, ScheduleError, ValidationError
from memq.events import Event, EventType, check_identifier
from memq.printable import shown
from memq.producers.mixin import ClientBase, check_flag
from memq.producers.ops import AskRole, Op, Read
from memq.schedule import parse_schedule
from memq.store.read import tasks as stored
from memq.store.read.tasks import Task


class TasksOps(ClientBase):
    """The scheduled-task operations (``producers/ops.py``) both clients run."""

    def _schedule_task_op(self, name: str, schedule: str, prompt: str, *, oneshot: bool,
                          trusted: bool, tz: str | None) -> Op[str]:
        check_flag("trusted", trusted)
        yield from self._authorize_op(EventType.TASK_SCHEDULED,
                                      {"trusted": trusted, "source": "tool"})
        check_identifier("name", name)
        _text("schedule", schedule)
        _text("prompt", prompt)
        check_flag("oneshot", oneshot)
        zone = self.config.scheduler.tz if tz is None else _text("tz", tz)
        now = now_utc()
        parsed = parse_schedule(schedule, now=now, tz=zone)
        if oneshot and not parsed.is_oneshot:
            raise ScheduleError(
                f"oneshot=True needs a one-time schedule such as 'in 2 hours' or 'tomorrow at"
                f" 9am', but {shown(schedule)} repeats ({parsed.cron_expr})")
        task_id = uuid7()
        payload = {
            "task_id": task_id, "name": name, "schedule": schedule,
            "cron_expr": parsed.cron_expr, "prompt": prompt, "oneshot": parsed.is_oneshot,
            "trusted": trusted, "tz": zone, "source": "tool",
            "run_at": None if parsed.run_at is None else to_rfc3339(parsed.run_at),
        }
        # The writer computes the first run from created_at: the same `now` as the parse.
        yield from self._send_op(EventType.TASK_SCHEDULED, payload, created_at=to_rfc3339(now))
        return task_id

    def _pause_task_op(self, task_id: str) -> Op[None]:
        return self._change_task_op(EventType.TASK_CHANGED, {"task_id": task_id, "paused": True})

    def _resume_task_op(self, task_id: str) -> Op[None]:
        return self._change_task_op(EventType.TASK_CHANGED,
                                    {"task_id": task_id, "paused": False})

    def _delete_task_op(self, task_id: str) -> Op[None]:
        return self._change_task_op(EventType.TASK_DELETED, {"task_id": task_id})

    def _change_task_op(self, etype: str, payload: dict[str, Any]) -> Op[None]:
        found = yield from self._task_op(payload["task_id"])
        role = yield AskRole("asking Redis who this client is")
        reason = authority.target_refusal(role, etype, trusted=found.is_trusted,
                                          source=found.source)
        if reason is not None:
            raise PermissionDenied(reason)
        # The name (unchanged) names the task's tenant, for the change feed to show the
        # event to that tenant alone (memq.tenants).
        yield from self._send_op(etype, {**payload, "name": found.name})

    def _task_op(self, task_id: str) -> Op[Task]:
        check_identifier("task_id", task_id)
        pending = [e for e in (yield from self._live_op(TASK_EVENTS))
                   if e.payload["task_id"] == task_id]
        found = yield Read(stored.task, (task_id,))
        tasks = with_pending_tasks([] if found is None else [found], pending)
        if not tasks:
            raise NotFound(no_task(task_id))
        return tasks[0]

    def _tasks_op(self) -> Op[list[Task]]:
        pending = yield from self._live_op(TASK_EVENTS)
        committed = yield Read(stored.tasks)
        return with_pending_tasks(committed, pending)


TASK_EVENTS = (EventType.TASK_SCHEDULED, EventType.TASK_CHANGED, EventType.TASK_DELETED)


def with_pending_tasks(committed: list[Task], pending: list[Event]) -> list[Task]:
    """``committed`` with the uncommitted task events applied in order, as the writer
    will apply them, sorted as :func:`store.read.tasks.tasks` sorts."""
    current = {task.id: task for task in committed}
    for event in pending:
        task_id = event.payload["task_id"]
        if event.type == EventType.TASK_SCHEDULED:
            current.setdefault(task_id, _scheduled(event))
        elif event.type == EventType.TASK_DELETED:
            current.pop(task_id, None)
        elif task_id in current:
            current[task_id] = _changed(current[task_id], event)
    return sorted(current.values(), key=lambda t: (t.next_run_at is None, t.next_run_at or "",
                                                   t.name, t.id))


def _scheduled(event: Event) -> Task:
    p = event.payload
    return Task(
        id=p["task_id"], name=p["name"], schedule=p["schedule"], cron_expr=p["cron_expr"],
        prompt=p["prompt"], source=p["source"], is_oneshot=p["oneshot"], is_paused=False,
        is_trusted=p["trusted"], tz=p["tz"], last_run_at=None,
        next_run_at=first_run(p["cron_expr"], p["tz"], oneshot=p["oneshot"],
                              run_at=p.get("run_at"), after=event.created_at),
        created_at=event.created_at, updated_at=event.created_at,
    )


def _changed(task: Task, event: Event) -> Task:
    """A pause or a resume (what this client sends); a one-shot keeps its one instant."""
    paused = bool(event.payload.get("paused", task.is_paused))
    next_run = task.next_run_at
    if not task.is_oneshot and paused:
        next_run = None
    elif not task.is_oneshot and task.is_paused:
        next_run = first_run(task.cron_expr, task.tz, oneshot=False, run_at=None,
                             after=event.created_at)
    return dataclasses.replace(task, is_paused=paused, next_run_at=next_run,
                               updated_at=event.created_at)


def _text(what: str, value: Any) -> str:
    if not isinstance(value, str):
        raise ValidationError(f"{what} must be a string, got {type(value).__name__}")
    if not value.strip():
        raise ValidationError(f"{what} must not be empty")
    return value


def no_task(task_id: object) -> str:
    """What a call on a task that is not there, or not the caller's to see, is told: one
    text for both, so that no answer tells a key limited to some users which ids exist."""
    return f"no scheduled task {shown(task_id):.60}"
