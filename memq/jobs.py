"""Job definitions: the RQ jobs memq runs, by name, and how every process builds them.

The writer enqueues jobs and the workers run them, but neither imports the other: a job
travels as data, its function named by dotted path. This module is the one place that
names those functions and builds queues, for the store, the workers and the scheduler.

Jobs are data, not code: they use RQ's JSON serializer (never pickle), and
:class:`JSONJob` runs only the functions in :data:`JOB_FUNCTIONS`, so a job planted in a
queue that names anything else is refused. rq-scheduler has no serializer option, so the
same class is handed to the scheduler (by :data:`JOB_CLASS`), the queues and the workers.
"""

from __future__ import annotations

import hashlib
import importlib
import inspect
import zlib
from collections.abc import Mapping
from typing import Any, cast

import orjson
import redis
from rq import Queue
from rq.exceptions import DeserializationError
from rq.job import Job
from rq.serializers import JSONSerializer

from memq.config import MAX_JOB_TIMEOUT_S
from memq.errors import ValidationError
from memq.printable import shown

EMBED = "memq.workers.embed.embed_messages"
"""Embed a batch of messages; results return as ``message.embedded`` events."""

CONSOLIDATE = "memq.workers.consolidate.consolidate"
"""Summarise one chunk of old turns; the summary returns as ``session.consolidated``."""

REQUEST_PASS = "memq.workers.consolidate.request_pass"
"""The periodic job that asks the writer for a consolidation pass."""

RUN_TASK = "memq.workers.tasks.run_task"
"""Deliver one run of a scheduled task to the agents."""

DELIVER_WEBHOOK = "memq.workers.webhooks.deliver"
"""POST one change to one webhook; the dispatcher reads the outcome and retries."""

JOB_FUNCTIONS: frozenset[str] = frozenset({EMBED, CONSOLIDATE, REQUEST_PASS, RUN_TASK,
                                           DELIVER_WEBHOOK})
"""Dotted paths of the only functions a memq worker will run."""

JOB_CLASS = "memq.jobs.JSONJob"
""":class:`JSONJob` by dotted path, for rq-scheduler's ``job_class`` option."""

SERIALIZER = JSONSerializer

MAX_JOB_DATA_BYTES = 32 * 1024 * 1024
"""The most a job's data may inflate to. The largest job memq makes is an embed job: 64
messages of at most 64 KiB, JSON-escaped (up to 6 bytes per byte), about 24 MiB. A job's
data is zlib-compressed in Redis, and 146 KB of it once inflated to 150 MB."""

MAX_JOB_INFO_BYTES = 1024 * 1024
"""The most a job's stored traceback (``exc_info``) may inflate to before it is cut."""

DEFAULT_JOB_TIMEOUT_S = Queue.DEFAULT_TIMEOUT
"""What a job whose timeout is not a positive number of seconds gets (RQ's default, 180 s)."""

TASK_RUN_TTL_S = 7 * 24 * 3600
"""How long after its instant a run the writer registered stays valid (as the fired marker
of a delivered slot is kept, see ``workers/tasks.py``)."""


def task_run_digest(task: Mapping[str, Any]) -> str:
    """The digest of a task run's data, as the writer registers it and a worker checks it
    (``memq:task-run:<task id>:<slot>``, see :mod:`memq.names`)."""
    return hashlib.sha256(orjson.dumps(dict(task), option=orjson.OPT_SORT_KEYS)).hexdigest()


class RefusedJobData(ValidationError, DeserializationError):
    """A job whose data is not memq's JSON (a pickle, say): it is refused, never loaded."""


class JSONJob(Job):
    """An RQ job that defaults to the JSON serializer and runs only memq's job functions."""

    allowed: frozenset[str] = JOB_FUNCTIONS
    """What this class runs; a test subclass may allow its own functions."""

    def __init__(
        self, id: str | None = None, connection: redis.Redis | None = None, serializer: Any = None
    ) -> None:
        super().__init__(id, connection, serializer or SERIALIZER)
        self._refusal: str | None = None

    def restore(self, raw_data: Any) -> Any:
        """Load the job's hash, within bounds: its data may not inflate beyond
        :data:`MAX_JOB_DATA_BYTES` (the job is then refused when it would run, alone), a
        stored traceback is cut, and a timeout is clamped (:func:`clamped_timeout`: RQ reads
        ``-1`` as "no limit")."""
        fields = dict(raw_data)
        self._refusal = None
        data = fields.get(b"data")
        if data and inflated_size(data, MAX_JOB_DATA_BYTES) > MAX_JOB_DATA_BYTES:
            self._refusal = (f"refusing job {self.id}: its data inflates beyond "
                             f"{MAX_JOB_DATA_BYTES} bytes")
            fields[b"data"] = b""
        info = fields.get(b"exc_info")
        if info and inflated_size(info, MAX_JOB_INFO_BYTES) > MAX_JOB_INFO_BYTES:
            fields[b"exc_info"] = b"(a traceback too large to show)"
        if b"timeout" in fields:
            fields[b"timeout"] = str(clamped_timeout(fields[b"timeout"])).encode()
        return super().restore(fields)

    def _deserialize_data(self) -> None:
        if self._refusal is not None:
            raise RefusedJobData(self._refusal)
        try:
            super()._deserialize_data()  # type: ignore[no-untyped-call]  # rq leaves it untyped
        except DeserializationError as exc:
            raise RefusedJobData(
                f"refusing job {self.id}: its data is not a JSON job ({exc.__cause__}); memq "
                "jobs are JSON only and a pickle is never loaded") from exc

    @property
    def func(self) -> Any:
        if self.func_name not in self.allowed:
            raise ValidationError(f"refusing job {self.id}: {self.func_name!r} is not a memq job")
        if self.instance is not None:
            raise ValidationError(f"refusing job {self.id}: memq jobs are functions, "
                                  f"not methods of {shown(self.instance):.60}")
        function = super().func
        try:
            # Forged arguments: a clear refusal rather than a TypeError from the call.
            inspect.signature(function).bind(*self.args, **self.kwargs)
        except TypeError as exc:
            raise ValidationError(f"refusing job {self.id}: {self.func_name} {exc}") from None
        return function

    # rq imports and calls any function a job's hash names as a callback, even after the
    # job itself was refused. memq registers none: whatever a forged job names is ignored.

    @property
    def success_callback(self) -> None:
        return None

    @property
    def failure_callback(self) -> None:
        return None

    @property
    def stopped_callback(self) -> None:
        return None


def inflated_size(value: bytes, limit: int) -> int:
    """How large ``value`` inflates (zlib), counting no further than ``limit + 1``; its own
    size when it is not zlib data (RQ then reads it as it is)."""
    inflater = zlib.decompressobj()
    try:
        inflated = inflater.decompress(value, limit + 1)
    except zlib.error:
        return len(value)
    return len(inflated)


def clamped_timeout(value: bytes | str | int) -> int:
    """A job's timeout as memq runs it: whole seconds, at most ``MAX_JOB_TIMEOUT_S``; what is
    not a positive number of seconds (``-1`` is RQ's "no limit") gets RQ's default."""
    try:
        seconds = int(value)
    except (TypeError, ValueError):
        return DEFAULT_JOB_TIMEOUT_S
    if seconds < 1:
        return DEFAULT_JOB_TIMEOUT_S
    return min(seconds, MAX_JOB_TIMEOUT_S)


def queue(name: str, connection: redis.Redis, job_class: type[JSONJob] = JSONJob,
          queue_class: type[Queue] = Queue) -> Queue:
    """A memq queue: JSON jobs of :class:`JSONJob`."""
    return queue_class(name, connection=connection, serializer=SERIALIZER, job_class=job_class)


def fetch(job_id: str, connection: redis.Redis) -> JSONJob:
    """One job by id, decoded as JSON; ``rq.exceptions.NoSuchJobError`` if it is gone."""
    return cast(JSONJob, JSONJob.fetch(job_id, connection=connection, serializer=SERIALIZER))


def fetch_many(job_ids: list[str], connection: redis.Redis) -> list[JSONJob | None]:
    """Jobs by id, None where one is gone, in the order asked."""
    found = JSONJob.fetch_many(job_ids, connection=connection, serializer=SERIALIZER)
    return cast("list[JSONJob | None]", found)


def resolve(dotted: str) -> Any:
    """The function a dotted job name stands for (imports its module)."""
    module, _, name = dotted.rpartition(".")
    return getattr(importlib.import_module(module), name)
