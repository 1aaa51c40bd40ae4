"""``deliver``: POST a webhook its next changes, signed, in order; the RQ job of
``memq-webhooks``.

The job carries everything it needs (the dispatcher copies it from the database,
``store/dispatch/webhooks.py``); the worker never opens the database. It never raises
for what the receiver does: a refused, failed, slow or redirecting delivery is a result
(``ok`` false, with the status or the error), which the dispatcher reads to retry it
later. Redirects are not followed: the change goes to the registered URL or nowhere.
"""

from __future__ import annotations

from typing import Any

import httpx

from memq import webhooks
from memq.printable import bounded


def deliver(url: str, secret: str, deliveries: list[list[str]],
            timeout_s: float = webhooks.TIMEOUT_S) -> dict[str, Any]:
    """Each of ``deliveries`` (``[delivery id, event type, body]``) POSTed in turn, until
    the first that fails: ``{"outcomes": [...]}``, one per delivery tried (``ok``, the HTTP
    ``status`` if any, an ``error``). One job holds a worker for one timeout at most."""
    outcomes = []
    with httpx.Client(timeout=timeout_s, follow_redirects=False) as http:
        for delivery_id, event_type, body in deliveries:
            outcome = _post(http, url, secret, delivery_id, event_type, body.encode())
            outcomes.append({"delivery": delivery_id, **outcome})
            if not outcome["ok"]:
                break
    return {"outcomes": outcomes}


def _post(http: httpx.Client, url: str, secret: str, delivery_id: str, event_type: str,
          raw: bytes) -> dict[str, Any]:
    headers = {"Content-Type": "application/json", "User-Agent": "memq-webhooks",
               webhooks.DELIVERY_HEADER: delivery_id, webhooks.EVENT_HEADER: event_type,
               webhooks.SIGNATURE_HEADER: webhooks.sign(secret, raw)}
    try:
        answer = http.post(url, content=raw, headers=headers)
    except httpx.HTTPError as exc:
        return {"ok": False, "status": None,
                "error": bounded(f"{type(exc).__name__}: {exc}", 300)}
    if answer.is_redirect:
        return {"ok": False, "status": answer.status_code,
                "error": "a redirect, not followed (deliveries go to the registered URL)"}
    return {"ok": answer.is_success, "status": answer.status_code,
            "error": None if answer.is_success else bounded(answer.text, 300)}
