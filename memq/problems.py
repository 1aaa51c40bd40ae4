"""memq's errors over HTTP: RFC 9457 problem details, both ways.

``memq serve`` answers every error with ``application/problem+json`` whose ``title`` is
the name of the :mod:`memq.errors` class (``ValidationError``, ``NotFound``...) and whose
``type`` is ``urn:memq:problem:<name>``; :func:`to_error` turns such a body back into that
class, so a remote client raises what a local one would. :class:`~memq.errors.EventsRejected`
carries its rejections (``rejections``: event id, type, reason, inbox entry).

This module is the contract between the server and its clients: it imports nothing but
memq's errors and the rejection record.
"""

from __future__ import annotations

from typing import Any

from memq import errors
from memq.errors import MemqError
from memq.printable import printable
from memq.rejections import Rejection

TYPE_PREFIX = "urn:memq:problem:"
MEDIA_TYPE = "application/problem+json"

STATUS: dict[type[MemqError], int] = {
    errors.ValidationError: 422,
    errors.NotFound: 404,
    errors.PermissionDenied: 403,
    errors.AuthenticationFailed: 401,
    errors.EventsRejected: 409,
    errors.DatabaseMismatch: 409,
    errors.FlushTimeout: 504,
    errors.Busy: 503,
    errors.RateLimited: 429,
    errors.FeedExpired: 410,
    errors.BrokerError: 503,
    errors.StoreError: 503,
    errors.ModelError: 503,
}
"""HTTP status by error class; a subclass takes its nearest listed ancestor's, and anything
else is a 500 (a fault of the server, not of the request)."""


def _classes() -> dict[str, type[MemqError]]:
    """Every class of memq's error tree, by name."""
    found: dict[str, type[MemqError]] = {}
    pending: list[type[MemqError]] = [MemqError]
    while pending:
        cls = pending.pop()
        found[cls.__name__] = cls
        pending.extend(cls.__subclasses__())
    return {name: cls for name, cls in found.items() if cls.__module__ == errors.__name__}


def status_of(error: MemqError) -> int:
    for cls in type(error).__mro__:
        if cls in STATUS:
            return STATUS[cls]
    return 500


def problem(name: str, status: int, detail: str, **extra: Any) -> dict[str, Any]:
    """A problem details body for the memq error class ``name``; what ``detail`` quotes
    of a caller's input is shown with its control characters escaped (a lone surrogate
    among them could not even be encoded in the answer)."""
    return {"type": TYPE_PREFIX + name, "title": name, "status": status,
            "detail": printable(detail), **extra}


def from_error(error: MemqError) -> dict[str, Any]:
    """The problem details of ``error``: its class, its status, its message."""
    extra: dict[str, Any] = {}
    if isinstance(error, errors.EventsRejected):
        extra["rejections"] = [
            {"event_id": r.event_id, "event_type": r.event_type, "reason": r.reason,
             "entry_id": r.entry_id} for r in error.rejections]
    if isinstance(error, errors.FeedExpired):
        extra["horizon"] = error.horizon
    return problem(type(error).__name__, status_of(error), str(error), **extra)


def to_error(status: int, body: Any) -> MemqError:
    """The memq error a problem details body (or any error answer) stands for.

    A body that names no class of memq's tree is turned into one by its status (a proxy's
    own 502 page, say), keeping what it said.
    """
    name = body.get("title") if isinstance(body, dict) else None
    detail = body.get("detail") if isinstance(body, dict) else None
    message = detail if isinstance(detail, str) else f"HTTP {status}: {str(body)[:200]}"
    cls = _classes().get(name) if isinstance(name, str) else None
    if cls is None:
        cls = _by_status(status)
    if cls is errors.EventsRejected:
        return errors.EventsRejected(message, _rejections(body))
    if cls is errors.FeedExpired:
        horizon = body.get("horizon") if isinstance(body, dict) else None
        return errors.FeedExpired(message, horizon if isinstance(horizon, int) else 0)
    return cls(message)


def _by_status(status: int) -> type[MemqError]:
    for cls, code in STATUS.items():
        if code == status and cls is not errors.DatabaseMismatch:
            return cls
    return errors.ValidationError if 400 <= status < 500 else MemqError


def _rejections(body: dict[str, Any]) -> list[Rejection]:
    found = body.get("rejections")
    if not isinstance(found, list):
        return []
    return [Rejection(event_id=r.get("event_id"), event_type=r.get("event_type"),
                      reason=str(r.get("reason", "")), entry_id=str(r.get("entry_id", "")))
            for r in found if isinstance(r, dict)]
