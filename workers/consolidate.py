"""Consolidation jobs: compress a chunk of old messages into a summary; request a pass.

``consolidate`` runs on ``memq-consolidate`` with the chunk inside the job (the writer
enqueues it; see ``store.consolidation_jobs``). It summarises with the configured
summariser, applies the guard rails, and sends one ``session.consolidated`` event: the
summary and the marking of its sources arrive together, so a worker that dies at any
point leaves nothing half done, and the chunk is simply selected again by a later pass.

``request_pass`` sends ``consolidation.requested``; rq-scheduler runs it every
``[consolidation] interval_hours`` once :func:`register_periodic` has registered it, and
``memq consolidate --now`` sends the same event directly.
"""

from __future__ import annotations

import functools
import logging
import time
from dataclasses import asdict
from typing import Any

from rq.exceptions import NoSuchJobError

from memq import names
from memq.clock import now_rfc3339, now_utc, uuid7
from memq.config import Config, ConsolidationConfig, EmbedConfig, LimitsConfig, LLMConfig
from memq.errors import ConfigError, InvalidEvent, MemqError, SummariserError, ValidationError
from memq.events import Event, EventType, check_identifier, check_payload
from memq.logs import log
from memq.workers import context
from memq.workers.summarise import ChunkMessage, Summariser, Summary, check, parse_messages

logger = logging.getLogger("memq.worker.consolidate")

PERIODIC_JOB_ID = "memq-consolidation-pass"
"""The one periodic job in rq-scheduler that requests a consolidation pass."""


def consolidate(
    session_id: str, messages: list[dict[str, Any]], user_id: str | None = None
) -> dict[str, Any]:
    """Summarise one chunk and send the result; raises (the job fails) when there is none.

    The facts the summary proposes are ``user_id``'s (the session's user), or global.
    """
    ctx = context.current()
    check_identifier("session_id", session_id)
    if user_id is not None:
        check_identifier("user_id", user_id)
    chunk = parse_messages(messages)
    started = time.perf_counter()
    summariser = summariser_for(ctx.config.llm, ctx.config.embed, ctx.config.consolidation)
    try:
        summary = summariser.summarise(chunk)
        content = check(chunk, summary)
        event = summary_event(ctx.config, session_id, chunk, content, summary)
    except MemqError as exc:
        log(logger, "consolidation failed; messages stay unconsolidated", logging.WARNING,
            session_id=session_id, messages=len(chunk), summariser=summariser.name,
            error=str(exc))
        raise
    ctx.send([event, *fact_events(event, user_id)])
    result = {
        "summary_id": event.payload["summary_id"], "messages": len(chunk),
        "chars_in": sum(len(m.content) for m in chunk), "chars_out": len(content),
        "facts": len(summary.facts), "summariser": summariser.name,
        "ms": round((time.perf_counter() - started) * 1000, 1),
    }
    log(logger, "chunk consolidated", session_id=session_id, **result)
    return result


def summary_event(
    config: Config, session_id: str, chunk: list[ChunkMessage], content: str, summary: Summary
) -> Event:
    """The ``session.consolidated`` event, validated with the writer's own rules."""
    payload = {
        "summary_id": uuid7(),
        "content": content,
        "source_ids": [m.id for m in chunk],
        "importance": config.consolidation.summary_importance,
        "facts": [asdict(fact) for fact in summary.facts],
    }
    try:
        check_payload(EventType.SESSION_CONSOLIDATED, payload, config.limits)
    except InvalidEvent as exc:
        raise SummariserError(f"the summary cannot be sent: {exc}") from exc
    return Event(id=uuid7(), type=EventType.SESSION_CONSOLIDATED, session_id=session_id,
                 created_at=now_rfc3339(), payload=payload)


def fact_events(summary: Event, user_id: str | None = None) -> list[Event]:
    """The summary's proposed facts as ``fact.set`` events from an agent, ``user_id``'s.

    Sent as ordinary fact changes, right after the summary, so the facts projection's rule
    holds (a fact the user set is never overwritten) and ``fact_history`` shows them.
    """
    owner = {} if user_id is None else {"user_id": user_id}
    return [
        Event(id=uuid7(), type=EventType.FACT_SET, session_id=None,
              created_at=summary.created_at,
              payload={**fact, "source": "agent", **owner})
        for fact in summary.payload.get("facts") or []
    ]


def request_event(min_age_hours: float | None = None, session_id: str | None = None) -> Event:
    """A ``consolidation.requested`` event (every session unless one is named)."""
    payload: dict[str, Any] = {}
    if min_age_hours is not None:
        payload["min_age_hours"] = min_age_hours
    event = Event(id=uuid7(), type=EventType.CONSOLIDATION_REQUESTED, session_id=session_id,
                  created_at=now_rfc3339(), payload=payload)
    try:
        check_payload(event.type, payload, LimitsConfig())
        if session_id is not None:
            check_identifier("session_id", session_id)
    except InvalidEvent as exc:
        raise ValidationError(str(exc).split(": ", 1)[-1]) from None
    return event


def request_pass(
    min_age_hours: float | None = None, session_id: str | None = None
) -> dict[str, Any]:
    """The periodic job: ask the writer for a consolidation pass."""
    event = request_event(min_age_hours, session_id)
    context.current().send([event])
    log(logger, "consolidation pass requested", event_id=event.id, session_id=session_id)
    return {"event_id": event.id}


def register_periodic(scheduler: Any, config: Config) -> bool:
    """Make sure rq-scheduler requests a pass every ``interval_hours``; True if (re)registered.

    Idempotent, so the scheduler process may call it on every start: a registration with
    the same interval is left alone (restarting the scheduler does not postpone the next
    pass); a changed interval replaces it, and the first pass is due at once.
    ``scheduler`` is an ``rq_scheduler.Scheduler`` built with ``job_class=JSONJob``.
    """
    interval = max(1, round(config.consolidation.interval_hours * 3600))
    if PERIODIC_JOB_ID in scheduler:
        try:
            job = scheduler.job_class.fetch(PERIODIC_JOB_ID, connection=scheduler.connection)
        except NoSuchJobError:
            job = None  # scheduled, but its job data is gone: register it afresh
        if (job is not None and job.meta.get("interval") == interval
                and job.origin == names.QUEUE_CONSOLIDATE):
            return False
        scheduler.cancel(PERIODIC_JOB_ID)
    log(logger, "periodic consolidation registered", interval_s=interval)
    scheduler.schedule(
        scheduled_time=now_utc(),
        func=f"{__name__}.request_pass",
        interval=interval,
        repeat=None,
        id=PERIODIC_JOB_ID,
        queue_name=names.QUEUE_CONSOLIDATE,
        result_ttl=interval * 2,
        description="request a consolidation pass",
    )
    return True


@functools.lru_cache(maxsize=4)
def summariser_for(
    llm: LLMConfig, embed: EmbedConfig, consolidation: ConsolidationConfig
) -> Summariser:
    """The configured summariser, kept per process so a loaded model stays warm."""
    if llm.base_url or llm.model:
        if not (llm.base_url and llm.model):
            raise ConfigError("[llm] needs both base_url and model, or neither")
        from memq.workers.llm import LLMSummariser

        return LLMSummariser(llm)
    from memq.workers.extractive import ExtractiveSummariser

    return ExtractiveSummariser(embed, target_ratio=consolidation.target_ratio)
