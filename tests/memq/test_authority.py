"""The authority table: who may send what, row by row, and generated events against it."""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from memq import authority, names
from memq.authority import (
    ADMIN_ONLY,
    RIGHTS,
    STREAM_OF_ROLE,
    Role,
    refusal,
    right_for,
    target_refusal,
    type_refusal,
)
from memq.clock import now_rfc3339, uuid7
from memq.errors import PermissionDenied
from memq.events import SCHEMAS, Event, EventType

AGENT, WORKER, ADMIN = Role.AGENT, Role.WORKER, Role.ADMIN
T = EventType

GENERATED = settings(max_examples=300, derandomize=True, database=None, deadline=None,
                     suppress_health_check=[HealthCheck.too_slow])
"""Seeded and bounded: the same examples on every run."""


def event(etype: str, payload: dict[str, Any]) -> Event:
    return Event(id=uuid7(), type=etype, session_id="s1", created_at=now_rfc3339(),
                 payload=payload)


# Written out by hand, independently of the table: what the issue asks, case by case.
SPEC: list[tuple[str, str, dict[str, Any], set[Role]]] = [
    ("append a turn", T.MESSAGE_APPENDED, {}, {AGENT, ADMIN}),
    ("import a legacy row", T.MESSAGE_IMPORTED, {}, {ADMIN}),
    ("import a legacy fact", T.FACT_IMPORTED, {}, {ADMIN}),
    ("import a legacy macro", T.MACRO_IMPORTED, {}, {ADMIN}),
    ("import a legacy task", T.TASK_IMPORTED, {}, {ADMIN}),
    ("forget a session", T.SESSION_FORGOTTEN, {}, {AGENT, ADMIN}),
    ("forget one message", T.MESSAGE_FORGOTTEN, {}, {AGENT, ADMIN}),
    ("forget a user", T.USER_FORGOTTEN, {}, {ADMIN}),
    ("apply retention", T.RETENTION_APPLIED, {}, {ADMIN}),
    ("set a user's fact (an agent's)", T.FACT_SET, {"user_id": "u1"}, {AGENT, WORKER, ADMIN}),
    ("store a vector", T.MESSAGE_EMBEDDED, {}, {WORKER, ADMIN}),
    ("record an embedding failure", T.MESSAGE_EMBEDDING_FAILED, {}, {WORKER, ADMIN}),
    ("store a summary", T.SESSION_CONSOLIDATED, {}, {WORKER, ADMIN}),
    ("request a consolidation pass", T.CONSOLIDATION_REQUESTED, {}, {WORKER, ADMIN}),
    ("record a task run", T.TASK_FIRED, {}, {WORKER, ADMIN}),
    ("set the user's fact", T.FACT_SET, {"source": "user"}, {ADMIN}),
    ("force over the user's fact", T.FACT_SET, {"source": "agent", "force": True}, {ADMIN}),
    ("set an agent fact", T.FACT_SET, {"source": "agent"}, {AGENT, WORKER, ADMIN}),
    ("set an agent fact, force=false", T.FACT_SET, {"source": "agent", "force": False},
     {AGENT, WORKER, ADMIN}),
    ("delete the user's fact", T.FACT_DELETED, {"source": "user"}, {ADMIN}),
    ("force-delete a fact", T.FACT_DELETED, {"source": "agent", "force": True}, {ADMIN}),
    ("delete a fact unconditionally", T.FACT_DELETED, {"source": None}, {ADMIN}),
    ("delete an agent fact", T.FACT_DELETED, {"source": "agent"}, {AGENT, ADMIN}),
    ("observe a macro", T.MACRO_OBSERVED, {}, {AGENT, ADMIN}),
    ("use a macro", T.MACRO_USED, {}, {AGENT, ADMIN}),
    ("schedule a trusted task", T.TASK_SCHEDULED, {"trusted": True}, {ADMIN}),
    ("schedule a config task", T.TASK_SCHEDULED, {"source": "config"}, {ADMIN}),
    ("schedule an untrusted task", T.TASK_SCHEDULED, {}, {AGENT, ADMIN}),
    ("make a task trusted", T.TASK_CHANGED, {"trusted": True}, {ADMIN}),
    ("pause a task", T.TASK_CHANGED, {"paused": True}, {AGENT, ADMIN}),
    ("change a task's prompt", T.TASK_CHANGED, {"prompt": "other"}, {AGENT, ADMIN}),
    ("delete a task", T.TASK_DELETED, {}, {AGENT, ADMIN}),
    ("approve a prefix", T.PREFIX_ALLOWED, {}, {ADMIN}),
    ("revoke a prefix", T.PREFIX_REVOKED, {}, {ADMIN}),
    ("put a document", T.DOCUMENT_PUT, {}, {AGENT, ADMIN}),
    ("put a user's document", T.DOCUMENT_PUT, {"user_id": "u1"}, {AGENT, ADMIN}),
    ("delete a document", T.DOCUMENT_DELETED, {}, {AGENT, ADMIN}),
    ("restart a document's time to live", T.DOCUMENT_TOUCHED, {}, {AGENT, ADMIN}),
    ("mint an API key", T.KEY_CREATED, {}, {ADMIN}),
    ("revoke an API key", T.KEY_REVOKED, {}, {ADMIN}),
    ("add a webhook", T.WEBHOOK_ADDED, {}, {ADMIN}),
    ("remove a webhook", T.WEBHOOK_REMOVED, {}, {ADMIN}),
    ("drop rejected events", T.REJECTED_DROPPED, {}, {ADMIN}),
]


def base_payload(etype: str) -> dict[str, Any]:
    """A valid payload of ``etype`` in its most ordinary variant."""
    task = {"task_id": "t1", "name": "n", "schedule": "every minute", "cron_expr": "* * * * *",
            "prompt": "p", "oneshot": False, "trusted": False, "tz": "UTC", "source": "tool",
            "run_at": None}
    message = {"message_id": "m1", "role": "user", "content": "hi", "importance": 0.5}
    return {
        T.MESSAGE_APPENDED: message,
        T.MESSAGE_IMPORTED: {**message, "created_at": now_rfc3339()},
        T.MESSAGE_EMBEDDED: {"message_id": "m1", "model": "m", "dim": 1, "vector_b64": "AAAAAA=="},
        T.MESSAGE_EMBEDDING_FAILED: {"message_id": "m1", "model": "m", "error": "e"},
        T.SESSION_CONSOLIDATED: {"summary_id": "s", "content": "c", "source_ids": ["m1"],
                                 "importance": 0.7},
        T.SESSION_FORGOTTEN: {},
        T.MESSAGE_FORGOTTEN: {"message_id": "m1"},
        T.USER_FORGOTTEN: {"user_id": "u1"},
        T.RETENTION_APPLIED: {"forgotten_before": now_rfc3339()},
        T.CONSOLIDATION_REQUESTED: {},
        T.FACT_SET: {"category": "c", "key": "k", "value": "v", "source": "agent"},
        T.FACT_DELETED: {"category": "c", "key": "k", "source": "agent"},
        T.MACRO_OBSERVED: {"tool": "read_file", "args": {"path": "a"}},
        T.MACRO_USED: {"macro_id": 1},
        T.TASK_SCHEDULED: task,
        T.TASK_CHANGED: {"task_id": "t1"},
        T.TASK_FIRED: {"task_id": "t1", "fired_at": now_rfc3339()},
        T.TASK_DELETED: {"task_id": "t1"},
        T.PREFIX_ALLOWED: {"prefix": "git status"},
        T.PREFIX_REVOKED: {"prefix": "git status"},
        T.DOCUMENT_PUT: {"namespace": ["notes"], "key": "k", "value": {"text": "v"}},
        T.DOCUMENT_DELETED: {"namespace": ["notes"], "key": "k"},
        T.DOCUMENT_TOUCHED: {"namespace": ["notes"], "key": "k"},
        T.KEY_CREATED: {"key_id": "0123456789abcdef", "name": "k", "secret_sha256": "0" * 64,
                        "users": ["u1"], "rights": ["read"]},
        T.KEY_REVOKED: {"key_id": "0123456789abcdef"},
        T.WEBHOOK_ADDED: {"webhook_id": "0123456789abcdef", "url": "https://example.com/h",
                          "types": ["fact.*"], "secret": "whsec_" + "a" * 43},
        T.WEBHOOK_REMOVED: {"webhook_id": "0123456789abcdef"},
        T.REJECTED_DROPPED: {"rejected_ids": [1]},
    }.get(etype, {})  # the legacy imports: the table looks at none of their fields


def spec_event(etype: str, changes: dict[str, Any]) -> Event:
    payload = {**base_payload(etype), **changes}
    return event(etype, {k: v for k, v in payload.items() if v is not None})


@pytest.mark.parametrize(("label", "etype", "changes", "allowed"), SPEC,
                         ids=[case[0] for case in SPEC])
@pytest.mark.parametrize("role", list(Role))
def test_each_case_of_the_spec(role: Role, label: str, etype: str, changes: dict[str, Any],
                               allowed: set[Role]) -> None:
    reason = refusal(role, spec_event(etype, changes))
    assert (reason is None) == (role in allowed), reason


def test_every_row_of_the_table_is_covered_by_the_spec() -> None:
    decided_by = {right_for(etype, spec_event(etype, changes).payload)
                  for _, etype, changes, _ in SPEC}
    assert set(RIGHTS) <= decided_by
    for right in RIGHTS:
        assert ADMIN in right.roles  # admin may send everything


def test_every_event_type_has_its_rows() -> None:
    assert {right.event_type for right in RIGHTS} == set(SCHEMAS)
    for etype in SCHEMAS:
        last = [r for r in RIGHTS if r.event_type == etype][-1]
        assert last.applies({}), f"{etype}: the last row must catch every other variant"


def test_a_type_without_rows_is_admin_only() -> None:
    assert right_for("user.forgotten", {}).roles == ADMIN_ONLY
    assert refusal(AGENT, event("user.forgotten", {})) is not None
    assert refusal(ADMIN, event("user.forgotten", {})) is None


def test_the_reason_names_the_event_the_variant_and_the_stream() -> None:
    reason = refusal(AGENT, spec_event(T.FACT_SET, {"source": "user"}))
    assert reason == ("fact.set with source=user may only come from admin, "
                      "not from an agent (memq:inbox)")
    reason = refusal(AGENT, spec_event(T.MESSAGE_EMBEDDED, {}))
    assert reason == ("message.embedded may only come from worker or admin, "
                      "not from an agent (memq:inbox)")
    reason = refusal(WORKER, spec_event(T.PREFIX_ALLOWED, {}))
    assert reason == ("prefix.allowed may only come from admin, "
                      "not from a worker (memq:inbox:worker)")


def test_check_raises_permission_denied() -> None:
    with pytest.raises(PermissionDenied, match=r"prefix\.allowed may only come from admin"):
        authority.check(AGENT, T.PREFIX_ALLOWED, {"prefix": "ls"})
    authority.check(ADMIN, T.PREFIX_ALLOWED, {"prefix": "ls"})


@pytest.mark.parametrize(
    ("etype", "trusted", "source", "agent_may"),
    [
        (T.TASK_CHANGED, False, "tool", True),
        (T.TASK_CHANGED, True, "tool", False),
        (T.TASK_CHANGED, False, "config", False),
        (T.TASK_DELETED, False, "tool", True),
        (T.TASK_DELETED, True, "tool", False),
        (T.TASK_DELETED, True, "config", False),
        (T.TASK_FIRED, True, "config", True),  # not a change: judged by the table alone
    ],
)
def test_protected_tasks_are_changed_by_admin_only(
    etype: str, trusted: bool, source: str, agent_may: bool
) -> None:
    for role in (AGENT, WORKER):
        assert (target_refusal(role, etype, trusted=trusted, source=source) is None) == agent_may
    assert target_refusal(ADMIN, etype, trusted=trusted, source=source) is None


def test_each_role_has_its_own_stream() -> None:
    assert authority.STREAM_OF_ROLE == {AGENT: names.INBOX_STREAM,
                                        WORKER: names.WORKER_INBOX_STREAM,
                                        ADMIN: names.ADMIN_INBOX_STREAM}
    assert set(authority.ROLE_OF_STREAM) == set(names.INBOX_STREAMS)


# -- generated ----------------------------------------------------------------------------

DECIDING = {
    "source": st.sampled_from(["agent", "user", "tool", "config", None]),
    "force": st.sampled_from([True, False, None]),
    "trusted": st.sampled_from([True, False, None]),
}
"""The payload fields a right may depend on, with the values that matter (None: absent)."""

NOISE = st.dictionaries(
    st.sampled_from(["category", "key", "value", "content", "prompt", "name", "paused",
                     "message_id", "task_id", "tool", "model"]),
    st.one_of(st.text(max_size=20), st.integers(), st.booleans(), st.none()),
    max_size=4,
)
"""Other fields, with any values: they must never change who may send an event."""


@st.composite
def payloads(draw: st.DrawFn) -> tuple[str, dict[str, Any], dict[str, Any]]:
    """An event type, the deciding fields drawn for it, and a payload with noise added."""
    etype = draw(st.sampled_from(sorted(SCHEMAS)))
    deciding = {k: draw(v) for k, v in DECIDING.items()}
    deciding = {k: v for k, v in deciding.items() if v is not None}
    noisy = {**draw(NOISE), **deciding}
    return etype, deciding, noisy


ADMIN_ONLY_TYPES = {T.MESSAGE_IMPORTED, T.FACT_IMPORTED, T.MACRO_IMPORTED, T.TASK_IMPORTED,
                    T.USER_FORGOTTEN, T.PREFIX_ALLOWED, T.PREFIX_REVOKED,
                    T.RETENTION_APPLIED, T.KEY_CREATED, T.KEY_REVOKED, T.WEBHOOK_ADDED,
                    T.WEBHOOK_REMOVED, T.REJECTED_DROPPED}
WORKER_RESULTS = {T.MESSAGE_EMBEDDED, T.MESSAGE_EMBEDDING_FAILED, T.SESSION_CONSOLIDATED,
                  T.TASK_FIRED, T.CONSOLIDATION_REQUESTED}
AGENT_ACTIONS = {T.MESSAGE_APPENDED, T.SESSION_FORGOTTEN, T.MESSAGE_FORGOTTEN,
                 T.MACRO_OBSERVED, T.MACRO_USED, T.FACT_DELETED, T.TASK_SCHEDULED,
                 T.TASK_CHANGED, T.TASK_DELETED, T.DOCUMENT_PUT, T.DOCUMENT_DELETED,
                 T.DOCUMENT_TOUCHED}


def privileged(etype: str, fields: dict[str, Any]) -> bool:
    """The variants the issue reserves to the person, stated again apart from the table."""
    source, forced, trusted = fields.get("source"), fields.get("force"), fields.get("trusted")
    return {
        T.FACT_SET: source == "user" or forced is True,
        T.FACT_DELETED: source == "user" or forced is True or "source" not in fields,
        T.TASK_SCHEDULED: trusted is True or source == "config",
        T.TASK_CHANGED: trusted is True,
    }.get(etype, etype in ADMIN_ONLY_TYPES)


@GENERATED
@given(payloads(), st.sampled_from(list(Role)))
@example((T.FACT_SET, {"source": "user"}, {"source": "user"}), AGENT)
@example((T.FACT_DELETED, {}, {}), AGENT)
@example((T.TASK_SCHEDULED, {"source": "config"}, {"source": "config"}), AGENT)
def test_generated_events_respect_the_rules(
    drawn: tuple[str, dict[str, Any], dict[str, Any]], role: Role
) -> None:
    etype, deciding, payload = drawn
    reason = refusal(role, event(etype, payload))
    if role is ADMIN:
        assert reason is None
        return
    assert reason == refusal(role, event(etype, deciding))  # only the deciding fields decide
    if privileged(etype, deciding):
        assert reason is not None
    elif etype in WORKER_RESULTS:
        assert (reason is None) == (role is WORKER)
    elif etype in AGENT_ACTIONS:
        assert (reason is None) == (role is AGENT)
    else:
        assert etype == T.FACT_SET
        assert reason is None  # an agent's own fact, from an agent or from a summary
    if reason is not None:
        assert etype in reason
        assert authority.STREAM_OF_ROLE[role] in reason
        assert len(reason) < 200


@pytest.mark.parametrize("role", list(Role))
@pytest.mark.parametrize("etype", sorted(EventType))
def test_type_refusal_agrees_with_the_rows(role: Role, etype: str) -> None:
    variants = [base_payload(etype), *({**base_payload(etype), **extra} for extra in (
        {"source": "user"}, {"force": True}, {"trusted": True}, {"source": "config"}))]
    sendable = any(refusal(role, Event(id="e1", type=etype, session_id="s1",
                                       created_at=now_rfc3339(), payload=p)) is None
                   for p in variants)
    reason = type_refusal(role, etype)
    assert (reason is None) == sendable
    if reason is not None:
        assert reason.startswith(f"{etype} may only come from ")
        assert reason.endswith(f"({STREAM_OF_ROLE[role]})")


@pytest.mark.parametrize("etype", [None, 7, ["message.appended"], "no.such_type"])
def test_type_refusal_leaves_unknown_types_to_the_decoder(etype: object) -> None:
    assert type_refusal(Role.AGENT, etype) is None
