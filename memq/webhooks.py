"""Webhooks: what a delivery carries, how it is signed, and how a receiver checks it.

A delivery is one change of the feed (``memq.store.read.changes.Change``) as JSON, POSTed
to the URL the person registered, with these headers (in the style of Stripe and GitHub):

- ``Memq-Delivery``: ``<webhook id>:<position>``, the same on every retry: a receiver
  that stores the ones it handled ignores a repeat (delivery is at least once);
- ``Memq-Event``: the change's type;
- ``Memq-Signature``: ``t=<unix seconds>,v1=<hex HMAC-SHA256 of "<t>." + body>`` under
  the webhook's secret, which ``memq webhooks add`` prints once. :func:`verify` checks it
  and refuses a timestamp more than five minutes off (a replayed old delivery).

Redirects are never followed: a delivery goes only to the URL the person registered.
"""

from __future__ import annotations

import hashlib
import hmac
import secrets
import time
from urllib.parse import urlsplit

DELIVERY_HEADER = "Memq-Delivery"
EVENT_HEADER = "Memq-Event"
SIGNATURE_HEADER = "Memq-Signature"
TOLERANCE_S = 300
MAX_URL_CHARS = 2000
BACKOFF_S = (1, 2, 5, 10, 30, 60, 120, 300, 600, 1800)
"""Seconds before each retry of a failed delivery; after the last, it is given up."""
TIMEOUT_S = 10.0
"""The longest one delivery waits for its receiver, all told."""
BUDGET_S = 30.0
"""How long one delivery job starts POSTs for; the rest of its batch is the next job's."""


def new_secret() -> str:
    return "whsec_" + secrets.token_urlsafe(32)


def sign(secret: str, body: bytes, at: int | None = None) -> str:
    """The ``Memq-Signature`` header of ``body`` sent at ``at`` (default: now)."""
    stamp = int(time.time()) if at is None else at
    digest = hmac.new(secret.encode(), f"{stamp}.".encode() + body, hashlib.sha256)
    return f"t={stamp},v1={digest.hexdigest()}"


def verify(secret: str, body: bytes, header: str | None, *, now: float | None = None,
           tolerance_s: int = TOLERANCE_S) -> bool:
    """Whether ``header`` signs ``body`` under ``secret``, sent within ``tolerance_s``.
    False for anything else, never an exception: a missing or forged header, and any
    signature under an empty secret (a receiver whose secret is unset)."""
    if not secret or not isinstance(header, str) or not header.isascii():
        return False
    fields = dict(part.partition("=")[::2] for part in header.split(","))
    stamp, given = fields.get("t", ""), fields.get("v1", "")
    if not stamp.isdigit() or len(stamp) > 12:
        return False
    if abs((time.time() if now is None else now) - int(stamp)) > tolerance_s:
        return False
    expected = sign(secret, body, int(stamp)).rpartition("v1=")[2]
    return hmac.compare_digest(expected, given)


def url_problem(url: str) -> str | None:
    """What keeps ``url`` from being a webhook's address, or None."""
    if not isinstance(url, str) or len(url) > MAX_URL_CHARS:
        return f"must be a URL of at most {MAX_URL_CHARS} characters"
    if not url.isascii() or any(c.isspace() or not c.isprintable() for c in url):
        return "must be ASCII, with no spaces or control characters"
    try:
        parts = urlsplit(url)
        parts.port  # noqa: B018 (raises for a port that is not a number in range)
    except ValueError as exc:
        return f"is not a URL a delivery can be sent to ({exc})"
    if parts.scheme not in ("http", "https") or not parts.hostname:
        return "must be an http:// or https:// URL with a host"
    if parts.username or parts.password:
        return "must not carry a user name or password (sign with the secret instead)"
    return None


def backoff_s(attempt: int) -> float | None:
    """Seconds before retry number ``attempt`` (1 = the first retry); None: give up."""
    return float(BACKOFF_S[attempt - 1]) if 1 <= attempt <= len(BACKOFF_S) else None
