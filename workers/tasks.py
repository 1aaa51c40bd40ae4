"""``run_task``: deliver a scheduled task's prompt to the agents, and record the run.

The job carries everything it needs (the writer copies it from the task's row when it
schedules the run); the worker never opens the database. One run:

1. a job that says the task is paused does nothing (the writer also takes the runs of a
   paused task off the scheduler and the queue; this covers a copy already on its way);
2. a run whose slot was already delivered does nothing -- the fired marker
   ``memq:task-fired:<task id>:<slot>`` makes a retried or duplicated job harmless;
2b. a run the writer did not register with exactly this data is refused (the job fails):
   only what the scheduler enqueued for a committed task runs, with the prompt and the
   trusted flag the task has (see ``store/dispatch/task_runs.py``);
3. the configured handler (``[scheduler] handler = "module:function"``) is called with
   the delivery; if it raises, the error is logged and carried in ``task.fired``
   (``handler_error``) and the run still counts: the prompt was delivered, and retrying
   a whole run for a side hook would deliver it twice;
4. in one MULTI: the fired marker, the ``memq:agent-inbox`` entry and the ``task.fired``
   event. Either all three are written or none, so a run is delivered and recorded once
   per slot; the handler alone may run again if the worker dies between 3 and 4.

The writer then sets ``last_run_at`` and the next run, or deletes a one-shot.
"""

from __future__ import annotations

import dataclasses
import importlib
import logging
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import redis

from memq import broker, jobs, names, tenants
from memq.clock import now_rfc3339, parse_rfc3339
from memq.errors import ConfigError, ValidationError
from memq.events import Event, EventType, encode
from memq.inbox import add_to_inbox
from memq.logs import log
from memq.workers.context import WorkerContext, current

logger = logging.getLogger("memq.tasks")

FIRED_MARKER_TTL_S = 7 * 24 * 3600
"""How long a delivered slot is remembered: far longer than a fired event takes to commit."""

_FIRED_NAMESPACE = uuid.UUID("5b0c8f36-2f5e-4d4c-8a51-0d6c2f3e9b27")


@dataclass(frozen=True)
class TaskRun:
    """The data a run job carries."""

    task_id: str
    name: str
    prompt: str
    trusted: bool
    oneshot: bool
    paused: bool
    scheduled_for: str

    @classmethod
    def from_job(cls, data: Any) -> TaskRun:
        if not isinstance(data, dict):
            raise ValidationError(f"run_task needs a task object, got {type(data).__name__}")
        kinds = {"task_id": str, "name": str, "prompt": str, "trusted": bool,
                 "oneshot": bool, "paused": bool, "scheduled_for": str}
        for key, kind in kinds.items():
            if not isinstance(data.get(key), kind):
                raise ValidationError(f"run_task: task.{key} must be {kind.__name__}, "
                                      f"got {data.get(key)!r:.60}")
        parse_rfc3339(data["scheduled_for"], what="task.scheduled_for")
        return cls(**{key: data[key] for key in kinds})

    def as_job(self) -> dict[str, Any]:
        """The data the job carries, as the writer wrote it."""
        return dataclasses.asdict(self)

    @property
    def slot(self) -> int:
        return int(parse_rfc3339(self.scheduled_for).timestamp())

    @property
    def tenant(self) -> str:
        """The task's tenant, which its (stored) name names (:mod:`memq.tenants`)."""
        return tenants.tenant_of(self.name)

    @property
    def session_id(self) -> str:
        """Where the run's turns go: a session of the task's own tenant."""
        return tenants.inside(self.tenant, f"{names.TASK_SESSION_PREFIX}{self.task_id}")


def run_task(task: dict[str, Any]) -> dict[str, Any]:
    """Deliver one run of a scheduled task; returns what happened (small, JSON-able)."""
    run = TaskRun.from_job(task)
    context = current()
    outcome = _run(run, context)
    log(logger, "task run", task_id=run.task_id, name=run.name,
        scheduled_for=run.scheduled_for, **outcome)
    return {"task_id": run.task_id, **outcome}


def _run(run: TaskRun, context: WorkerContext) -> dict[str, Any]:
    if run.paused:
        return {"status": "skipped", "reason": "paused"}
    marker = names.task_fired_key(run.task_id, run.slot)
    with broker.translated(context.config.redis_url, f"checking run {marker}"):
        if context.redis.exists(marker):
            return {"status": "skipped", "reason": "already delivered"}
        registered: Any = context.redis.get(names.task_run_key(run.task_id, run.slot))
    check_registered(run, registered)
    fired_at = now_rfc3339()
    delivery = {"task_id": run.task_id, "tenant": run.tenant, "session_id": run.session_id,
                "name": run.name, "prompt": run.prompt, "trusted": run.trusted,
                "fired_at": fired_at, "scheduled_for": run.scheduled_for}
    handler_error = call_handler(context.config.scheduler.handler, delivery)
    event = fired_event(run, fired_at, handler_error)
    if not _record(context, marker, delivery, event):
        return {"status": "skipped", "reason": "already delivered"}
    return {"status": "fired", "fired_at": fired_at, "handler_error": handler_error}


def check_registered(run: TaskRun, registered: bytes | None) -> None:
    """Refuse a run unless the writer registered exactly its data (see the module, 2b)."""
    if registered is not None and registered == jobs.task_run_digest(run.as_job()).encode():
        return
    what = "no run" if registered is None else "another run"
    raise ValidationError(
        f"refusing run {run.task_id} at {run.scheduled_for}: the writer registered {what} "
        "of this task for that instant (a job planted in Redis, or one for a task changed "
        "since it was scheduled)")


def fired_event(run: TaskRun, fired_at: str, handler_error: str | None) -> Event:
    """``task.fired``; its id follows from the task and slot, so a slot is recorded once."""
    payload: dict[str, Any] = {"task_id": run.task_id, "fired_at": fired_at,
                               "scheduled_for": run.scheduled_for, "name": run.name}
    if handler_error is not None:
        payload["handler_error"] = handler_error[:4000]
    event_id = uuid.uuid5(_FIRED_NAMESPACE, f"{run.task_id}/{run.slot}")
    return Event(id=str(event_id), type=EventType.TASK_FIRED, session_id=None,
                 created_at=fired_at, payload=payload)


def call_handler(spec: str, delivery: dict[str, Any]) -> str | None:
    """Call the configured handler with the delivery; its error as text, or None."""
    if not spec:
        return None
    try:
        load_handler(spec)(dict(delivery))
    except Exception as exc:  # a hook must not undo a delivery: record and go on
        log(logger, "task handler failed", logging.ERROR, task_id=delivery["task_id"],
            handler=spec, error=f"{type(exc).__name__}: {exc}")
        return f"{type(exc).__name__}: {exc}"
    return None


def load_handler(spec: str) -> Callable[[dict[str, Any]], Any]:
    """Import ``module:function``; :class:`ConfigError` naming it when that fails."""
    module_name, _, attribute = spec.partition(":")
    try:
        target: Any = importlib.import_module(module_name.strip())
        for part in attribute.strip().split("."):
            target = getattr(target, part)
    except (ImportError, AttributeError, ValueError) as exc:
        raise ConfigError(f"[scheduler] handler {spec!r} cannot be loaded: {exc}") from exc
    if not callable(target):
        raise ConfigError(f"[scheduler] handler {spec!r} is not callable")
    return target  # type: ignore[no-any-return]


def _record(context: WorkerContext, marker: str, delivery: dict[str, Any],
            event: Event) -> bool:
    """Marker, agent-inbox entry and ``task.fired`` all at once; False if already done."""
    fields: dict[Any, Any] = {k: _field(v) for k, v in delivery.items()}
    stream = context.stream
    with broker.translated(context.config.redis_url, f"delivering run {marker}"), \
            context.redis.pipeline() as pipe:
        try:
            pipe.watch(marker)  # type: ignore[no-untyped-call]  # redis-py leaves it untyped
            if pipe.exists(marker):
                return False
            pipe.multi()
            pipe.set(marker, delivery["fired_at"], ex=FIRED_MARKER_TTL_S)
            maxlen = context.config.scheduler.agent_inbox_maxlen or None
            pipe.xadd(names.AGENT_INBOX_STREAM, fields, maxlen=maxlen, approximate=True)
            add_to_inbox(pipe, stream, [encode(event)])
            pipe.execute()
        except redis.WatchError:
            return False  # another copy of this job delivered the slot first
    return True


def _field(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    return str(value)
