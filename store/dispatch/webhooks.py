"""The webhook dispatcher (``memq webhooks run``): follows the change feed and hands each
webhook its changes, one delivery job at a time, on RQ's ``memq-webhooks`` queue.

Per webhook, in Redis (``memq:webhook:<id>``, admin's alone): the position it has been
delivered up to, the job in flight and the attempt. Each tick, for each webhook:

- a job in flight that has not finished is left alone: a webhook has at most one delivery
  running, so a slow or failing receiver holds one worker at a time, never another
  webhook's deliveries, and never the writer, which knows nothing of webhooks;
- a finished job's outcome is recorded (``memq webhooks deliveries``); a success moves the
  position on, a failure is retried after :data:`memq.webhooks.BACKOFF_S` (1 s, 2 s, 5 s
  ... 30 min), and given up (recorded) after the last;
- with no job in flight, the next matching changes after the position are enqueued, at
  most :data:`BATCH` in one job, which POSTs them one by one, in order, and stops at the
  first that fails.

Delivery is at least once: a dispatcher killed between enqueueing and recording sends the
same delivery again (the same ``Memq-Delivery`` id), in order, one after another.

A removed webhook is sent nothing more, and what Redis held for it goes (:meth:`forget`):
its state, its outcomes, and its delivery job (which carries its secret and the changes'
data) once it is not running; one running when it was removed posts once more, and is
deleted once it ends.
"""

from __future__ import annotations

import logging
import threading
import time
from dataclasses import dataclass
from typing import Any

import apsw
import orjson
import redis
from rq.exceptions import NoSuchJobError
from rq.job import JobStatus

from memq import jobs, names, webhooks
from memq.clock import now_rfc3339
from memq.errors import MemqError
from memq.store.read import changes
from memq.store.read.webhooks import Webhook, active_with_secrets, removed_ids

logger = logging.getLogger("memq.webhooks")

NEVER_SENT = ("key.", "webhook.")
"""Changes no webhook is sent: a key's digest, a webhook's secret."""
SCAN = 1000
"""Most changes one tick reads for one webhook looking for its next."""
BATCH = 50
"""Most changes one delivery job sends, in order: a receiver that keeps up gets a backlog
without a job per change; one that fails or hangs stops the job at its first failure."""
KEPT_OUTCOMES = 100
RUNNING = frozenset({"queued", "started", "deferred", "scheduled"})


@dataclass
class State:
    position: int
    job: str = ""
    pending: int = 0
    attempt: int = 0
    retry_at: float = 0.0


class Dispatcher:
    def __init__(self, conn: apsw.Connection, connection: redis.Redis,
                 timeout_s: float = webhooks.TIMEOUT_S) -> None:
        self.conn = conn
        self.redis = connection
        self.queue = jobs.queue(names.QUEUE_WEBHOOKS, connection)
        self.timeout_s = timeout_s
        self.forgotten: set[str] = set()
        """Removed webhooks whose Redis state is gone (this process need not look again)."""

    def run(self, stop: threading.Event, interval_s: float = 0.02) -> None:
        """Tick until ``stop``; a Redis or a database not there yet is waited for."""
        while not stop.is_set():
            try:
                self.tick()
            except (redis.RedisError, apsw.Error, MemqError) as exc:
                logger.warning("webhooks: %s; trying again", exc)
                stop.wait(1.0)
            stop.wait(interval_s)

    def tick(self, now: float | None = None) -> None:
        with self.conn:  # one snapshot of the webhooks
            hooks = active_with_secrets(self.conn)
            removed = [i for i in removed_ids(self.conn) if i not in self.forgotten]
        for hook in hooks:
            self._advance(hook, time.time() if now is None else now)
        for hook_id in removed:
            self.forget(hook_id)

    def forget(self, hook_id: str) -> None:
        """Delete a removed webhook's state, outcomes and delivery jobs (queued, or kept
        finished for their result's time: each holds its secret and changes' data), unless
        one is still running (then at a later tick)."""
        found = [_text(k).removeprefix("rq:job:") for k in self.redis.scan_iter(
            match=f"rq:job:memq-webhook-{hook_id}-*", count=1000)]
        for job_id in found:
            try:
                job = jobs.fetch(job_id, self.redis)
            except NoSuchJobError:
                continue
            if job.get_status(refresh=False) == JobStatus.STARTED:
                return
            job.delete()
        key = names.WEBHOOK_PREFIX + hook_id
        results = list(self.redis.scan_iter(match=f"rq:results:memq-webhook-{hook_id}-*"))
        self.redis.delete(key, f"{key}:deliveries", *results)
        self.forgotten.add(hook_id)

    def _advance(self, hook: Webhook, now: float) -> None:
        state = self._state(hook)
        if state.job:
            outcome = self._outcome(state.job)
            if outcome is None:
                return
            self._settle(hook, state, outcome, now)
        if now >= state.retry_at:
            self._enqueue_next(hook, state)
        self._save(hook, state)

    def _settle(self, hook: Webhook, state: State, outcome: dict[str, Any], now: float
                ) -> None:
        """Move past what was delivered; retry the first failure later, or give it up."""
        tried = outcome.get("outcomes")
        if not isinstance(tried, list) or not tried:  # the job itself failed or was lost
            tried = [{"delivery": f"{hook.id}:{state.pending}", **outcome}]
        for result in tried:
            position = int(str(result["delivery"]).rpartition(":")[2])
            if result.get("ok"):
                self._record(hook, position, state.attempt + 1, result)
                state.position, state.pending, state.attempt = position, 0, 0
                continue
            state.attempt += 1
            wait = webhooks.backoff_s(state.attempt)
            self._record(hook, position, state.attempt, {**result, "given_up": wait is None})
            if wait is None:  # given up: on to the next change
                state.position, state.pending, state.attempt = position, 0, 0
            else:
                state.pending, state.retry_at = position, now + wait
        state.job = ""

    def _enqueue_next(self, hook: Webhook, state: State) -> None:
        batch = self._batch(hook, state)
        if not batch:
            return
        state.pending = batch[0].position
        job_id = f"memq-webhook-{hook.id}-{state.pending}-{state.attempt}"
        assert hook.secret is not None
        deliveries = [[f"{hook.id}:{c.position}", c.type, orjson.dumps(c).decode()]
                      for c in batch]
        state.job = job_id
        if self._exists(job_id):  # enqueued by a dispatcher that died before it saved
            return
        self.queue.enqueue(jobs.DELIVER_WEBHOOK, hook.url, hook.secret, deliveries,
                           self.timeout_s, job_id=job_id,
                           job_timeout=int(webhooks.BUDGET_S + 2 * self.timeout_s) + 30,
                           result_ttl=24 * 3600, failure_ttl=24 * 3600)

    def _exists(self, job_id: str) -> bool:
        try:
            jobs.fetch(job_id, self.redis)
        except NoSuchJobError:
            return False
        return True

    def _batch(self, hook: Webhook, state: State) -> list[changes.Change]:
        """The changes to deliver next, in order: from the one being retried, or after the
        position; at most :data:`BATCH` of them."""
        start = state.pending - 1 if state.pending else state.position
        with self.conn:
            found, reached = changes.page(self.conn, start, SCAN)
        seen = (_as_seen(hook, c) for c in found)
        batch = [c for c in seen if c is not None][:BATCH]
        if state.pending and (not batch or batch[0].position != state.pending):
            state.attempt = 0  # the change retried was deleted since (retention)
        if not batch:
            state.position, state.pending = max(state.position, reached), 0
        return batch

    def _outcome(self, job_id: str) -> dict[str, Any] | None:
        """A finished job's outcome, or None while it runs."""
        try:
            job = jobs.fetch(job_id, self.redis)
        except NoSuchJobError:
            return {"ok": False, "status": None, "error": "the delivery job was lost"}
        found = job.get_status(refresh=False)
        status = str(getattr(found, "value", found) or "")  # RQ's JobStatus is an enum
        if status in RUNNING:
            return None
        result = job.return_value() if status == "finished" else None
        if isinstance(result, dict):
            return result
        return {"ok": False, "status": None, "error": f"the delivery job {status}"}

    def _state(self, hook: Webhook) -> State:
        raw = {_text(k): _text(v) for k, v in
               self.redis.hgetall(names.WEBHOOK_PREFIX + hook.id).items()}
        return State(int(raw.get("position", hook.after)), raw.get("job", ""),
                     int(raw.get("pending", 0)), int(raw.get("attempt", 0)),
                     float(raw.get("retry_at", 0.0)))

    def _save(self, hook: Webhook, state: State) -> None:
        self.redis.hset(names.WEBHOOK_PREFIX + hook.id, mapping={
            "position": state.position, "job": state.job, "pending": state.pending,
            "attempt": state.attempt, "retry_at": state.retry_at})

    def _record(self, hook: Webhook, position: int, attempt: int, outcome: dict[str, Any]
                ) -> None:
        key = f"{names.WEBHOOK_PREFIX}{hook.id}:deliveries"
        entry = {"delivery": f"{hook.id}:{position}", "position": position,
                 "attempt": attempt, "at": now_rfc3339(), **outcome}
        pipe = self.redis.pipeline()
        pipe.lpush(key, orjson.dumps(entry))
        pipe.ltrim(key, 0, KEPT_OUTCOMES - 1)
        pipe.execute()


def _text(value: bytes | str) -> str:
    return value.decode() if isinstance(value, bytes) else value


def _as_seen(hook: Webhook, change: changes.Change) -> changes.Change | None:
    """``change`` as ``hook`` is sent it (its tenant's, in its names), or None."""
    if change.type.startswith(NEVER_SENT) or not changes.matches(change, hook.types):
        return None
    seen = change if hook.tenant is None else changes.in_tenant(hook.tenant, change)
    if seen is None or (hook.user_id is not None and seen.user_id != hook.user_id):
        return None
    return seen


def outcomes(connection: redis.Redis, webhook_id: str) -> list[dict[str, Any]]:
    """A webhook's latest delivery outcomes, newest first."""
    key = f"{names.WEBHOOK_PREFIX}{webhook_id}:deliveries"
    return [orjson.loads(raw) for raw in connection.lrange(key, 0, KEPT_OUTCOMES - 1)]
