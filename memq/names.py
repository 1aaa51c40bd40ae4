"""Names shared by every process: Redis keys, consumer groups and RQ queues."""

from __future__ import annotations

INBOX_STREAM = "memq:inbox"
"""The agents' inbox: what ``MemoryClient`` sends (as the agent role) travels here."""

WORKER_INBOX_STREAM = "memq:inbox:worker"
"""The workers' inbox: embeddings, summaries, task runs (as the worker role)."""

ADMIN_INBOX_STREAM = "memq:inbox:admin"
"""The person's inbox: the CLI, the scheduler, and any client with full rights."""

KEYS_INBOX_STREAM = "memq:inbox:keys"
"""What ``memq serve`` sends for API keys, each entry naming its key: judged with the
agent's rights and the key's grant. Only the server's admin credentials may push it."""

INBOX_STREAMS = (INBOX_STREAM, WORKER_INBOX_STREAM, ADMIN_INBOX_STREAM, KEYS_INBOX_STREAM)
"""Every event travels through one of these to the writer; which one says who sent it
(:mod:`memq.authority` decides what each may carry)."""

INBOX_QUEUES = {
    INBOX_STREAM: "memq:queue:agent",
    WORKER_INBOX_STREAM: "memq:queue:worker",
    KEYS_INBOX_STREAM: "memq:queue:keys",
}
"""Where agents and workers send: a list each, which the writer alone moves into its inbox
stream. Their Redis users may RPUSH there and XADD to no stream the writer reads, so no
sender chooses a stream entry's id (an explicit id can overflow a position or exhaust a
stream for everyone); the writer's relay (store/write/relay.py) adds each item with ``*``."""

RELAYED_KEYS = {stream: f"{queue}:relayed" for stream, queue in INBOX_QUEUES.items()}
"""Per queue, how many items the relay has ever moved: with the list's length, read in the
same MULTI as a push, it tells a client each pushed item's ordinal (1, 2, ...)."""

COMMITTED_ORDINAL_KEYS = {
    stream: f"{queue}:committed" for stream, queue in INBOX_QUEUES.items()}
"""Per queue, the ordinal of the last item the writer committed; a client's ``flush``
waits on it as an admin's waits on the stream's :data:`COMMITTED_KEYS`."""

ORDINAL_FIELD = b"ordinal"
"""Set by the relay on each entry it moves from a queue: the item's ordinal."""

WRITER_GROUP = "memq-writer"
"""The consumer group of the single writer; entries stay pending until committed."""

WRITER_CONSUMER = "writer"
"""A fixed consumer name, so a restarted writer finds its predecessor's pending entries."""

EVENT_FIELD = b"event"
"""The stream entry field that carries the JSON event."""

REPLAY_FIELD = b"replay_of"
"""Set on entries re-sent by ``memq rejected replay``: the rejected row they come from."""

SENDER_FIELD = b"sender"
"""Set by a client on each entry it sends: its sender id (:mod:`memq.rejections`), under
which the writer reports the entries it rejects, so the client's ``flush`` can raise them."""

KEY_SEQ_FIELD = b"kseq"
"""Set by the relay on each entry of the keys' queue: its key's own count of the items
sent for it (1, 2, ...). The keys' items are relayed key by key in turn, not in the order
they came (store/write/relay.py), so a keyed sender's ``flush`` waits on its key's count
(:func:`key_count`), not on the queue's ordinal."""

INBOX_FIELDS = frozenset({EVENT_FIELD, REPLAY_FIELD, SENDER_FIELD, ORDINAL_FIELD,
                          KEY_SEQ_FIELD})
"""Every field an inbox entry may carry; an entry with another is set aside."""

COMMITTED_KEY = "memq:committed"
"""The id of the last ``memq:inbox`` entry the writer committed; ``flush`` waits on it."""

COMMITTED_KEYS = {
    INBOX_STREAM: COMMITTED_KEY,
    WORKER_INBOX_STREAM: "memq:committed:worker",
    ADMIN_INBOX_STREAM: "memq:committed:admin",
    KEYS_INBOX_STREAM: "memq:committed:keys",
}
"""Per inbox stream, the id of its last entry the writer committed (stream ids are only
comparable within one stream)."""

KEY_COUNT_PREFIX = "memq:queue:keys:key:"
"""+ an API key's id + ``:pushed``, ``:relayed``, ``:committed``: how many items were sent
for the key, the relay moved and the writer committed. Written by the servers (admin),
the relay and the writer; three integers a key, kept (there are few keys, and a count
that expired would leave a waiting ``flush`` without an answer)."""


COUNTED_MARK = b"#"
"""Leads a keys' queue item whose push counted it for its key: the relay gives only those
a ``kseq``, so items an older server queued uncounted leave the counts exact."""

KEY_POSITION_BASE = 10**12
"""Added to a key's count to make the positions of the keys' queue: above every ordinal the
queue gave before it was counted per key, so a client that kept such an ordinal (alive
across an upgrade) takes the new positions at its next write, and a server tells the
two apart."""


def key_count(sender: str, count: str) -> str:
    """``sender``: a keys' queue entry's sender field, ``sender:key[:narrowing]``; counted
    by key, whoever sent it through whichever token of the key (store/write/relay.py takes
    the key the same way, in Lua)."""
    parts = sender.split(":", 2)
    return key_counter(parts[1] if len(parts) > 1 else parts[0], count)


def key_counter(key_id: str, count: str) -> str:
    """A key's ``pushed``, ``relayed`` or ``committed`` count (:data:`KEY_COUNT_PREFIX`)."""
    return f"{KEY_COUNT_PREFIX}{key_id}:{count}"


REJECTIONS_PREFIX = "memq:rejections:"
"""+ a sender id: a stream of the rejections of that sender's entries, for its ``flush``
(capped, and expiring a week after the last one: see :mod:`memq.rejections`)."""


def rejections_key(sender: str) -> str:
    return f"{REJECTIONS_PREFIX}{sender}"


DATABASE_KEY = "memq:database"
"""Which database this Redis keyspace's inbox belongs to (JSON: its id, path, host, when
claimed): claimed by the first writer, checked by every other writer and by clients."""

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
QUEUE_WEBHOOKS = "memq-webhooks"
QUEUES = (QUEUE_EMBED, QUEUE_CONSOLIDATE, QUEUE_TASKS, QUEUE_WEBHOOKS)

WEBHOOK_PREFIX = "memq:webhook:"
"""``memq:webhook:<id>``: a webhook's delivery state (a hash: the position delivered up to,
the job in flight, attempts, when to retry); ``memq:webhook:<id>:deliveries``: the latest
outcomes (a capped list). Written by the dispatcher alone (admin)."""

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


TASK_RUN_PREFIX = "memq:task-run:"
"""``memq:task-run:<task id>:<unix seconds>``: set by the writer when it registers a run,
holding the digest of the task's committed state; a run job without it is not memq's."""


def task_run_key(task_id: str, slot: int) -> str:
    return f"{TASK_RUN_PREFIX}{task_id}:{slot}"


CONSOLIDATION_PLANNED_PREFIX = "memq:consolidation:planned:"
"""+ a request's event id: set once the writer has planned that pass (``--wait`` reads it)."""

ERASED_PREFIX = "memq:erased:"
"""+ a forget's event id: set once the writer has finished it (the WAL truncated, the RQ jobs
that carried the text deleted), with what was erased (``memq forget`` waits for it)."""

CONSOLE_ENDED_PREFIX = "memq:console:ended:"
"""+ a console session's nonce: set when the person signs out, until the session would have
expired, so a copy of its cookie is refused by every server of the database."""
