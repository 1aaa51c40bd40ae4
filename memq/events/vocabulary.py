"""The event vocabulary: every type, its schema version and its payload fields.

Types are past tense. Each type has a schema version; a payload that changes shape gets
a new version and an upcaster from the old one (:data:`UPCASTERS`), because stored events
are never rewritten.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from enum import StrEnum
from typing import Any

import memq.events.rules as rules
from memq.events.fields import Field, Schema


class EventType(StrEnum):
    MESSAGE_APPENDED = "message.appended"
    MESSAGE_IMPORTED = "message.imported"
    MESSAGE_EMBEDDED = "message.embedded"
    MESSAGE_EMBEDDING_FAILED = "message.embedding_failed"
    SESSION_CONSOLIDATED = "session.consolidated"
    SESSION_FORGOTTEN = "session.forgotten"
    MESSAGE_FORGOTTEN = "message.forgotten"
    USER_FORGOTTEN = "user.forgotten"
    RETENTION_APPLIED = "retention.applied"
    CONSOLIDATION_REQUESTED = "consolidation.requested"
    FACT_SET = "fact.set"
    FACT_DELETED = "fact.deleted"
    FACT_IMPORTED = "fact.imported"
    MACRO_OBSERVED = "macro.observed"
    MACRO_USED = "macro.used"
    MACRO_IMPORTED = "macro.imported"
    TASK_SCHEDULED = "task.scheduled"
    TASK_CHANGED = "task.changed"
    TASK_FIRED = "task.fired"
    TASK_DELETED = "task.deleted"
    TASK_IMPORTED = "task.imported"
    PREFIX_ALLOWED = "prefix.allowed"
    PREFIX_REVOKED = "prefix.revoked"
    DOCUMENT_PUT = "document.put"
    DOCUMENT_DELETED = "document.deleted"
    DOCUMENT_TOUCHED = "document.touched"
    KEY_CREATED = "key.created"
    KEY_REVOKED = "key.revoked"
    WEBHOOK_ADDED = "webhook.added"
    WEBHOOK_REMOVED = "webhook.removed"
    REJECTED_DROPPED = "rejected.dropped"




ROLES = frozenset({"user", "assistant", "tool", "system"})
FACT_SOURCES = frozenset({"agent", "user"})
TASK_SOURCES = frozenset({"tool", "config"})
MAX_EMBEDDING_DIM = 8192
"""The most dimensions a stored embedding may have."""
MAX_MIN_AGE_HOURS = 24.0 * 365 * 100
"""A consolidation request's age limit beyond which nothing could ever be old enough."""


_TENANT = Field(str, required=False, max_chars=40, check=rules.tenant)


def _opt(kind: type | tuple[type, ...], **kw: Any) -> Field:
    return Field(kind, required=False, nullable=True, **kw)


def _optional(spec: Field) -> Field:
    return dataclasses.replace(spec, required=False)


_ID = Field(str, identifier=True)
_TEXT = Field(str, max_chars=None)  # bounded by limits.max_content_bytes instead
_UNIT = Field(float, low=0.0, high=1.0)
_TIMESTAMP = Field(str, timestamp=True)
_MESSAGE_FIELDS: dict[str, Field] = {
    "message_id": _ID,
    "role": Field(str, choices=ROLES),
    "content": _TEXT,
    "importance": _UNIT,
    "tool_call_id": _opt(str, identifier=True),
    "tool_name": _opt(str, identifier=True),
    "tool_calls": _opt(list),
    # Who the session belongs to. Optional and additive (a v1 payload without them is
    # still a v1 payload): the first message of a session sets them, later ones may
    # omit them, and naming a different owner is refused by the writer.
    "user_id": _opt(str, identifier=True),
    "agent_id": _opt(str, identifier=True),
}
_TASK_ID = Field(str, check=rules.task_id)
_TASK_FIELDS: dict[str, Field] = {
    "task_id": _TASK_ID,
    "name": _ID,
    "schedule": _ID,
    "cron_expr": Field(str, check=rules.cron),
    "prompt": _TEXT,
    "oneshot": Field(bool),
    "trusted": Field(bool),
    "tz": Field(str, check=rules.timezone),
    "source": Field(str, choices=TASK_SOURCES),
    "run_at": _opt(str, timestamp=True),
}
_FACT_NAMES: dict[str, Field] = {"category": _ID, "key": _ID}
_PREFIX = Field(str, max_chars=500, check=rules.prefix)
_MODEL = _ID
MAX_TTL_MINUTES = 60.0 * 24 * 365 * 100
"""The longest time to live a document may have (a century)."""
_DOCUMENT_NAMES: dict[str, Field] = {
    "namespace": Field(list, check=rules.namespace),
    "key": _ID,
    "user_id": _opt(str, identifier=True),  # None: a global document
}

SCHEMAS: dict[str, Schema] = {
    EventType.MESSAGE_APPENDED: Schema(1, _MESSAGE_FIELDS, needs_session=True),
    EventType.MESSAGE_IMPORTED: Schema(
        1,
        {
            **_MESSAGE_FIELDS,
            "created_at": _TIMESTAMP,
            "tool_calls_json": _opt(str, max_chars=None, check=rules.json_list),
            # Embeddings are decoded, and so checked, by the applier (the store's encoding).
            "embedding_b64": _opt(str, max_chars=None),
            "embedding_json": _opt(str, max_chars=None),
            "embedding_model": _opt(str, identifier=True),
            "embedding_dim": _opt(int, low=1, high=MAX_EMBEDDING_DIM),
            "embedding_error": _opt(str, max_chars=None),
            "consolidated_at": _opt(str, timestamp=True),
        },
        needs_session=True,
    ),
    EventType.MESSAGE_EMBEDDED: Schema(
        1,
        {
            "message_id": _ID,
            "model": _MODEL,
            "dim": Field(int, low=1, high=MAX_EMBEDDING_DIM),
            "vector_b64": Field(str, max_chars=65536),
        },
    ),
    EventType.MESSAGE_EMBEDDING_FAILED: Schema(
        1, {"message_id": _ID, "model": _MODEL, "error": Field(str, max_chars=4000)}
    ),
    EventType.SESSION_CONSOLIDATED: Schema(
        1,
        {
            "summary_id": _ID,
            "content": _TEXT,
            "source_ids": Field(list, check=rules.source_ids),
            "importance": _UNIT,
            "facts": _opt(list, check=rules.proposed_facts),
        },
        needs_session=True,
    ),
    EventType.SESSION_FORGOTTEN: Schema(1, {}, needs_session=True),
    # One message of the event's session, and the summary built from it
    # (store/projections/forgetting.py); a message of another session is left alone.
    EventType.MESSAGE_FORGOTTEN: Schema(1, {"message_id": _ID}, needs_session=True),
    EventType.USER_FORGOTTEN: Schema(1, {"user_id": _ID}),
    # The writer's periodic retention pass (store/write/retention.py): the records of the
    # forgets committed before `forgotten_before` go, the messages of `sessions` created
    # before `messages_before`, and every tool call recorded before `calls_before`
    # (store/projections/retention.py).
    EventType.RETENTION_APPLIED: Schema(1, {
        "forgotten_before": _optional(_TIMESTAMP),
        "messages_before": _optional(_TIMESTAMP),
        "sessions": Field(list, required=False, check=rules.retention_sessions),
        "calls_before": _optional(_TIMESTAMP),
        "documents_at": _optional(_TIMESTAMP),
    }),
    # A pass over every session, or over one when the event names a session.
    EventType.CONSOLIDATION_REQUESTED: Schema(
        1, {"min_age_hours": _opt(float, low=0.0, high=MAX_MIN_AGE_HOURS)}
    ),
    EventType.FACT_SET: Schema(
        1,
        {
            **_FACT_NAMES,
            "value": _TEXT,
            "source": Field(str, choices=FACT_SOURCES),
            "force": Field(bool, required=False),
            "user_id": _opt(str, identifier=True),  # None: a global fact
            # When the value became true in the world (absent: when it was sent).
            "valid_from": _opt(str, timestamp=True),
        },
    ),
    EventType.FACT_DELETED: Schema(
        1,
        {
            **_FACT_NAMES,
            # Optional so an operator's bare deletion still works: without a source the
            # deletion is unconditional; with one, the user-fact guard of fact.set applies.
            "source": Field(str, choices=FACT_SOURCES, required=False),
            "force": Field(bool, required=False),
            "user_id": _opt(str, identifier=True),
            # When the value stopped being true in the world (absent: when it was sent).
            "valid_to": _opt(str, timestamp=True),
        },
    ),
    EventType.MACRO_OBSERVED: Schema(1, {"tool": _ID, "args": Field(dict)}, needs_session=True),
    # Version 2: `macro_id` is the macro's own id (store/projections/macros.py), which
    # forgetting other calls never changes. In the log, version 1 named a macro by its
    # place among those learned, which a forget renumbered (migration 0024 turns those
    # into ids).
    # `tool`: the macro's trigger tool, whose stored form names its tenant (memq.tenants),
    # so the change feed can show the use to that tenant alone; absent before tenants.
    EventType.MACRO_USED: Schema(2, {"macro_id": Field(int, low=1), "tool": _optional(_ID)}),
    EventType.TASK_SCHEDULED: Schema(1, _TASK_FIELDS),
    EventType.TASK_CHANGED: Schema(
        1,
        {
            "task_id": _TASK_ID,
            "paused": Field(bool, required=False),
            **{k: _optional(f) for k, f in _TASK_FIELDS.items() if k not in {"task_id", "source"}},
        },
    ),
    EventType.TASK_FIRED: Schema(
        1,
        {
            "task_id": _TASK_ID,
            "fired_at": _TIMESTAMP,
            # the run's slot, so a late or early clock cannot make it fire twice
            "scheduled_for": _opt(str, timestamp=True),
            # the configured handler's failure; the run still counts as delivered
            "handler_error": _opt(str, max_chars=4000),
            # the task's name, which names its tenant (see task.deleted)
            "name": _optional(_ID),
        },
    ),
    # `name`: the task's, whose stored form names its tenant (memq.tenants), so the
    # change feed shows a deletion to that tenant alone; absent before tenants.
    EventType.TASK_DELETED: Schema(1, {"task_id": _TASK_ID, "name": _optional(_ID)}),
    # The legacy upgrade (store/legacy.py) records these, never a client: each carries one
    # row of the seed's table whole, ids and timestamps included, so nothing is lost.
    EventType.FACT_IMPORTED: Schema(
        1,
        {
            "fact_id": Field(int, low=1),
            **_FACT_NAMES,
            "value": _TEXT,
            "source": Field(str, choices=FACT_SOURCES),
            "created_at": _TIMESTAMP,
            "updated_at": _TIMESTAMP,
        },
    ),
    EventType.MACRO_IMPORTED: Schema(
        1,
        {
            "macro_id": Field(int, low=1),
            "trigger_tool": _ID,
            "trigger_args_pattern": _TEXT,
            "next_tool": _ID,
            "next_args": _opt(str, max_chars=None),
            "confidence": _UNIT,
            "used_count": Field(int, low=0),
            "created_at": _TIMESTAMP,
            "updated_at": _TIMESTAMP,
        },
    ),
    EventType.TASK_IMPORTED: Schema(
        1,
        {
            **{k: f for k, f in _TASK_FIELDS.items() if k != "run_at"},
            "paused": Field(bool),
            "next_run_at": _opt(str, timestamp=True),
            "last_run_at": _opt(str, timestamp=True),
            "created_at": _TIMESTAMP,
            "updated_at": _TIMESTAMP,
        },
    ),
    # Documents: JSON values under a namespace path and a key (a key-value store for agent
    # frameworks), with an optional time to live and a vector of the text to search by.
    EventType.DOCUMENT_PUT: Schema(
        1,
        {
            **_DOCUMENT_NAMES,
            "value": Field(dict),
            "ttl_minutes": _opt(float, low=0.0, high=MAX_TTL_MINUTES),
            "model": _opt(str, identifier=True),
            "dim": _opt(int, low=1, high=MAX_EMBEDDING_DIM),
            "vector_b64": _opt(str, max_chars=65536),
        },
    ),
    EventType.DOCUMENT_DELETED: Schema(1, _DOCUMENT_NAMES),
    # A read that restarts the time to live of the documents it read.
    EventType.DOCUMENT_TOUCHED: Schema(1, _DOCUMENT_NAMES),
    # An approval is one tenant's (memq/tenants.py; absent: 'default').
    EventType.PREFIX_ALLOWED: Schema(1, {"prefix": _PREFIX, "tenant": _TENANT}),
    EventType.PREFIX_REVOKED: Schema(1, {"prefix": Field(str, max_chars=500,
                                                         check=rules.revoked_prefix),
                                         "tenant": _TENANT}),
    # API keys (memq keys): what a bearer of the key may reach. The secret itself is never
    # logged, only its digest; users / agents absent: every user / agent.
    EventType.KEY_CREATED: Schema(
        1,
        {
            "key_id": Field(str, check=rules.key_id),
            "name": _ID,
            "secret_sha256": Field(str, check=rules.sha256),
            "users": _opt(list, check=rules.granted_ids),
            "agents": _opt(list, check=rules.granted_ids),
            "rights": Field(list, check=rules.rights),
            "expires_at": _opt(str, timestamp=True),
            # The key's own budget ([limits] key_units_per_s / key_concurrent when absent).
            "units_per_s": _opt(int, low=1, high=10**9),
            "concurrent": _opt(int, low=1, high=10**6),
            # The tenant whose ids it reaches (memq/tenants.py); absent: 'default'.
            "tenant": _TENANT,
        },
    ),
    EventType.KEY_REVOKED: Schema(1, {"key_id": Field(str, check=rules.key_id)}),
    # Webhooks (memq/webhooks.py) are the person's; the secret signs each delivery.
    EventType.WEBHOOK_ADDED: Schema(
        1,
        {
            "webhook_id": Field(str, check=rules.key_id),
            "url": Field(str, max_chars=2000, check=rules.webhook_url),
            "types": Field(list, check=rules.type_patterns),
            "user_id": _opt(str, identifier=True),
            "secret": Field(str, max_chars=100, check=rules.webhook_secret),
            # Only this tenant's changes, in its names (absent: every change, as stored).
            "tenant": _TENANT,
        },
    ),
    EventType.WEBHOOK_REMOVED: Schema(1, {"webhook_id": Field(str, check=rules.key_id)}),
    # The person drops events the writer set aside, having read why (a replay's opposite).
    EventType.REJECTED_DROPPED: Schema(
        1, {"rejected_ids": Field(list, check=rules.rejected_ids)}),
}

Upcaster = Callable[[dict[str, Any]], dict[str, Any]]
UPCASTERS: dict[tuple[str, int], Upcaster] = {
    # A client of version 1 sends the id it read from `macros`: since migration 0024, the
    # macro's own id, as version 2 names it.
    (EventType.MACRO_USED, 1): lambda payload: payload,
}
"""(type, old version) -> function returning the payload in version old + 1. The writer
upcasts what arrives before logging it; the log keeps each event in the version it was
logged in, and an applier knows every version its log may hold."""
