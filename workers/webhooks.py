"""``deliver``: POST a webhook its next changes, signed, in order; the RQ job of
``memq-webhooks``.

The job carries everything it needs (the dispatcher copies it from the database,
``store/dispatch/webhooks.py``); the worker never opens the database. It never raises for
what the receiver does: a refused, failed, slow or redirecting delivery is a result (``ok``
false, with the status or the error), which the dispatcher reads to retry it later.
Redirects are not followed: a change goes to the registered URL or nowhere.

Bounded whatever the receiver does: each POST has ``timeout_s`` in all (connecting,
sending, the answer's head and at most 1 KB of its body: a receiver that trickles its
answer byte by byte is cut there), and a job starts no POST once
:data:`memq.webhooks.BUDGET_S` is spent,
returning what it did: the dispatcher goes on from there.
"""

from __future__ import annotations

import time
from concurrent.futures import ThreadPoolExecutor
from concurrent.futures import TimeoutError as Late
from typing import Any

import httpx

from memq import tls, webhooks
from memq.printable import bounded

MAX_ANSWER_BYTES = 1024
"""What is read of an answer's body, for the record of a failure."""


def deliver(url: str, secret: str, deliveries: list[list[str]],
            timeout_s: float = webhooks.TIMEOUT_S) -> dict[str, Any]:
    """Each of ``deliveries`` (``[delivery id, event type, body]``) POSTed in turn, until
    the first that fails or the budget is spent: ``{"outcomes": [...]}``, one per
    delivery tried (``ok``, the HTTP ``status`` if any, an ``error``)."""
    outcomes: list[dict[str, Any]] = []
    started = time.monotonic()
    with ThreadPoolExecutor(1, thread_name_prefix="memq-webhook") as pool:
        for delivery_id, event_type, body in deliveries:
            if outcomes and time.monotonic() - started > webhooks.BUDGET_S:
                break
            outcome = _within(pool, url, secret, delivery_id, event_type, body.encode(),
                              timeout_s)
            outcomes.append({"delivery": delivery_id, **outcome})
            if not outcome["ok"]:
                break
    return {"outcomes": outcomes}


def _within(pool: ThreadPoolExecutor, url: str, secret: str, delivery_id: str,
            event_type: str, raw: bytes, timeout_s: float) -> dict[str, Any]:
    """One POST, given up (its connection closed) once ``timeout_s`` has passed."""
    client = httpx.Client(timeout=timeout_s, follow_redirects=False, verify=tls.default_context())
    try:
        attempt = pool.submit(_post, client, url, secret, delivery_id, event_type, raw)
        try:
            return attempt.result(timeout=timeout_s)
        except Late:
            return {"ok": False, "status": None,
                    "error": f"no whole answer within {timeout_s:g} s"}
    finally:
        client.close()  # a POST still reading fails at once, and its thread ends


def _post(client: httpx.Client, url: str, secret: str, delivery_id: str, event_type: str,
          raw: bytes) -> dict[str, Any]:
    headers = {"Content-Type": "application/json", "User-Agent": "memq-webhooks",
               webhooks.DELIVERY_HEADER: delivery_id, webhooks.EVENT_HEADER: event_type,
               webhooks.SIGNATURE_HEADER: webhooks.sign(secret, raw)}
    try:
        with client.stream("POST", url, content=raw, headers=headers) as answer:
            if answer.is_success:
                return {"ok": True, "status": answer.status_code, "error": None}
            if answer.is_redirect:
                return {"ok": False, "status": answer.status_code, "error": "a redirect, "
                        "not followed (deliveries go to the registered URL)"}
            return {"ok": False, "status": answer.status_code, "error": _head(answer)}
    except (httpx.HTTPError, httpx.InvalidURL, ValueError, OSError) as exc:
        return {"ok": False, "status": None,
                "error": bounded(f"{type(exc).__name__}: {exc}", 300)}


def _head(answer: httpx.Response) -> str:
    """At most :data:`MAX_ANSWER_BYTES` of an answer's body, as text."""
    read = b""
    for chunk in answer.iter_raw():
        read += chunk
        if len(read) >= MAX_ANSWER_BYTES:
            break
    return bounded(read[:MAX_ANSWER_BYTES].decode("utf-8", "replace"), 300)
