"""Names shared by every process: Redis keys, consumer groups and RQ queues."""

from __future__ import annotations

INBOX_STREAM = "memq:inbox"
"""Every event travels through this stream to the writer."""

WRITER_GROUP = "memq-writer"
"""The consumer group of the single writer; entries stay pending until committed."""

WRITER_CONSUMER = "writer"
"""A fixed consumer name, so a restarted writer finds its predecessor's pending entries."""

EVENT_FIELD = b"event"
"""The stream entry field that carries the JSON event."""

REPLAY_FIELD = b"replay_of"
"""Set on entries re-sent by ``memq rejected replay``: the rejected row they come from."""

COMMITTED_KEY = "memq:committed"
"""The id of the last inbox entry the writer committed; ``flush`` waits on it."""

WRITER_HEARTBEAT_KEY = "memq:writer:heartbeat"
"""Refreshed by the writer after each batch; ``status`` reads it."""

WRITER_STALLED_KEY = "memq:writer:stalled"
"""Why the writer cannot commit right now (disk full, database error), while it retries;
deleted by the next acknowledged batch. ``memq status`` shows it."""

WRITER_STATS_KEY = "memq:writer:stats"
"""A hash of the writer's running batch counters and histograms; ``memq metrics`` reads it."""

AGENT_INBOX_STREAM = "memq:agent-inbox"
"""Where scheduled task prompts are delivered to agents."""

QUEUE_EMBED = "memq-embed"
QUEUE_CONSOLIDATE = "memq-consolidate"
QUEUE_TASKS = "memq-tasks"
QUEUES = (QUEUE_EMBED, QUEUE_CONSOLIDATE, QUEUE_TASKS)

TASK_JOB_PREFIX = "memq-task_"
"""rq-scheduler job ids of scheduled task runs: ``memq-task_<task id>_<unix seconds>``."""

TASK_FIRED_PREFIX = "memq:task-fired:"
"""``memq:task-fired:<task id>:<unix seconds>`` is set when a run is delivered: one per slot."""

TASK_SESSION_PREFIX = "scheduled_"
"""A scheduled task's prompt reaches the agents under session ``scheduled_<task id>``."""


def task_job_id(task_id: str, slot: int) -> str:
    """The job id of a task's run at ``slot`` (unix seconds): one job per task and run."""
    return f"{TASK_JOB_PREFIX}{task_id}_{slot}"


def task_fired_key(task_id: str, slot: int) -> str:
    return f"{TASK_FIRED_PREFIX}{task_id}:{slot}"

CONSOLIDATION_PLANNED_PREFIX = "memq:consolidation:planned:"
"""+ a request's event id: set once the writer has planned that pass (``--wait`` reads it)."""
