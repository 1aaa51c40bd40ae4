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

AGENT_INBOX_STREAM = "memq:agent-inbox"
"""Where scheduled task prompts are delivered to agents."""

QUEUE_EMBED = "memq-embed"
QUEUE_CONSOLIDATE = "memq-consolidate"
QUEUE_TASKS = "memq-tasks"
QUEUES = (QUEUE_EMBED, QUEUE_CONSOLIDATE, QUEUE_TASKS)

CONSOLIDATION_PLANNED_PREFIX = "memq:consolidation:planned:"
"""+ a request's event id: set once the writer has planned that pass (``--wait`` reads it)."""
