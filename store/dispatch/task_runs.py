"""Keeping exactly one pending rq-scheduler run per active scheduled task.

A run is an rq-scheduler job on queue ``memq-tasks`` whose id names the task and the
instant it is for (``memq-task_<task id>_<unix seconds>``, see :mod:`memq.names`), so
the wanted state follows from the ``scheduled_tasks`` rows alone and can be compared with
what Redis holds, whatever happened in between:

* an active task (not paused, with a ``next_run_at``) wants the job of its next run;
  scheduled jobs of other instants, or of tasks that are paused or gone, are cancelled;
* a wanted job that is missing is scheduled -- unless it is already on its way (queued or
  running) or already delivered (the worker's fired marker is set and its ``task.fired``
  event is still travelling to the writer);
* a ``next_run_at`` in the past (the scheduler or Redis was down) is scheduled as it is:
  rq-scheduler enqueues it at once, it fires once, and its ``task.fired`` computes the
  next run from then -- one catch-up run, not one per missed slot;
* jobs already queued for a task that was paused or deleted are taken off the queue.

Each run the writer schedules is also registered, ``memq:task-run:<task id>:<slot>`` holding
the digest of the data the job carries (the task as committed, see
:func:`memq.jobs.task_run_digest`): a tasks worker runs only a job that matches its
registration, so a job planted in Redis for a task that does not exist, or with a prompt or
a trusted flag of its own, is refused. Agents cannot write either (their ACL user has no
``rq:*`` key and no ``memq:task-run:*`` key); workers may read the registrations only.

The same comparison runs after each commit (for the tasks the batch touched) and as the
writer's reconciler (for all of them), which is how an empty Redis gets its runs back.
It runs on the writer's thread and reads with the writer's connection.
"""

from __future__ import annotations

import logging
import time
from collections import defaultdict
from collections.abc import Iterable
from dataclasses import dataclass
from datetime import datetime
from typing import Any

import apsw
import orjson
import redis
from rq.job import Job, JobStatus
from rq_scheduler import Scheduler

from memq import jobs, names
from memq.clock import parse_rfc3339
from memq.logs import log
from memq.store.effects import Effects

logger = logging.getLogger("memq.tasks")

RUN_TASK = jobs.RUN_TASK

_IN_FLIGHT = {JobStatus.QUEUED, JobStatus.STARTED, JobStatus.DEFERRED}


@dataclass(frozen=True)
class WantedRun:
    task_id: str
    run_at: datetime
    job: dict[str, Any]

    @property
    def slot(self) -> int:
        return int(self.run_at.timestamp())

    @property
    def job_id(self) -> str:
        return names.task_job_id(self.task_id, self.slot)


@dataclass
class SyncResult:
    scheduled: int = 0
    cancelled: int = 0
    dequeued: int = 0


class TaskRuns:
    """The after-commit hook and reconciler that register scheduled task runs."""

    def __init__(self, conn: apsw.Connection, broker: redis.Redis) -> None:
        self.conn = conn
        self.redis = broker
        self.scheduler = Scheduler(queue_name=names.QUEUE_TASKS, connection=broker,
                                   job_class=jobs.JOB_CLASS)
        self.queue = jobs.queue(names.QUEUE_TASKS, broker)

    def after_commit(self, effects: Effects) -> None:
        if effects.tasks_changed:
            self.sync(set(effects.tasks_changed))

    def reconcile(self) -> None:
        result = self.sync(None)
        if result.scheduled or result.cancelled or result.dequeued:
            log(logger, "task runs reconciled", scheduled=result.scheduled,
                cancelled=result.cancelled, dequeued=result.dequeued)

    def sync(self, task_ids: set[str] | None) -> SyncResult:
        """Make Redis hold the wanted runs of ``task_ids`` (None: every task)."""
        wanted = self._wanted(task_ids)
        self._register(wanted.values())
        result = SyncResult()
        scheduled = self._scheduled_jobs(task_ids)
        for task_id, job_ids in scheduled.items():
            keep = wanted[task_id].job_id if task_id in wanted else None
            for job_id in job_ids - {keep}:
                self._cancel(job_id)
                result.cancelled += 1
        result.dequeued = self._dequeue_inactive(task_ids, wanted)
        # A task a batch just changed gets its job written again even when the instant is
        # the same: the prompt or trusted flag it carries may be what changed.
        refresh = task_ids is not None
        present: set[str] = set().union(*scheduled.values())
        candidates = [run for run in wanted.values() if refresh or run.job_id not in present]
        for run in self._not_on_their_way(candidates, present):
            self._schedule(run)
            result.scheduled += 1
        return result

    # -- the database side ----------------------------------------------------------

    def _wanted(self, task_ids: set[str] | None) -> dict[str, WantedRun]:
        query = """SELECT id, name, prompt, is_trusted, is_oneshot, next_run_at
                   FROM scheduled_tasks WHERE is_paused = 0 AND next_run_at IS NOT NULL"""
        params: tuple[Any, ...] = ()
        if task_ids is not None:
            query += " AND id IN (SELECT value FROM json_each(?))"
            params = (orjson.dumps(sorted(task_ids)).decode(),)
        wanted = {}
        for task_id, name, prompt, trusted, oneshot, next_run_at in self.conn.execute(
                query, params):
            job = {"task_id": task_id, "name": name, "prompt": prompt,
                   "trusted": bool(trusted), "oneshot": bool(oneshot), "paused": False,
                   "scheduled_for": next_run_at}
            wanted[task_id] = WantedRun(task_id, parse_rfc3339(next_run_at), job)
        return wanted

    # -- the Redis side -------------------------------------------------------------

    def _scheduled_jobs(self, task_ids: set[str] | None) -> dict[str, set[str]]:
        """Task id -> ids of its jobs waiting in rq-scheduler."""
        found: dict[str, set[str]] = defaultdict(set)
        pattern = f"{names.TASK_JOB_PREFIX}*"
        for member, _ in self.redis.zscan_iter(self.scheduler.scheduled_jobs_key,
                                               match=pattern, count=500):
            job_id = member.decode()
            task_id = _task_of(job_id)
            if task_ids is None or task_id in task_ids:
                found[task_id].add(job_id)
        return found

    def _not_on_their_way(self, runs: list[WantedRun], present: set[str]) -> list[WantedRun]:
        """The runs that are neither queued, running nor already delivered."""
        pipe = self.redis.pipeline(transaction=False)
        for run in runs:
            pipe.hget(Job.key_for(run.job_id), "status")
            pipe.exists(names.task_fired_key(run.task_id, run.slot))
        replies = pipe.execute()
        due = []
        for run, status, fired in zip(runs, replies[::2], replies[1::2], strict=True):
            state = status.decode() if status is not None else None
            if fired or (state in _IN_FLIGHT and run.job_id not in present):
                continue
            due.append(run)
        return due

    def _register(self, runs: Iterable[WantedRun]) -> None:
        """Register the wanted runs (again: a job scheduled by an older writer, or whose
        registration Redis lost, gets one); before any is scheduled, so a job is never on
        its way without the registration it needs."""
        pipe = self.redis.pipeline(transaction=False)
        now = time.time()
        for run in runs:
            ttl = max(0, int(run.run_at.timestamp() - now)) + jobs.TASK_RUN_TTL_S
            pipe.set(names.task_run_key(run.task_id, run.slot), jobs.task_run_digest(run.job),
                     ex=ttl)
        pipe.execute()

    def _schedule(self, run: WantedRun) -> None:
        self.scheduler.enqueue_at(run.run_at, RUN_TASK, task=run.job, job_id=run.job_id,
                                  queue_name=names.QUEUE_TASKS)

    def _cancel(self, job_id: str) -> None:
        self.scheduler.cancel(job_id)
        self.redis.delete(Job.key_for(job_id), _registration_of(job_id))

    def _dequeue_inactive(self, task_ids: set[str] | None, wanted: dict[str, WantedRun]) -> int:
        """Jobs already queued for tasks that were paused or deleted since: they must not run.

        A job of an active task is left alone even if its instant moved: it was due.
        """
        if task_ids is not None and task_ids <= wanted.keys():
            return 0  # every task touched is still active: no need to read the queue
        count = 0
        for job_id in self.queue.get_job_ids():
            if not job_id.startswith(names.TASK_JOB_PREFIX):
                continue
            task_id = _task_of(job_id)
            if task_id in wanted or (task_ids is not None and task_id not in task_ids):
                continue
            self.queue.remove(job_id)
            self.redis.delete(Job.key_for(job_id), _registration_of(job_id))
            count += 1
        return count


def _task_of(job_id: str) -> str:
    return job_id.removeprefix(names.TASK_JOB_PREFIX).rsplit("_", 1)[0]


def _registration_of(job_id: str) -> str:
    """The registration key of a run job (``memq-task_<task id>_<slot>``)."""
    task_id, _, slot = job_id.removeprefix(names.TASK_JOB_PREFIX).rpartition("_")
    return f"{names.TASK_RUN_PREFIX}{task_id}:{slot}"
