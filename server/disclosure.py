"""What an error may tell a caller of the server (the API's problems, the console's pages).

Errors about the server's own parts name Redis URLs and users, paths and files, which a
caller has no business reading: the caller gets what kind of trouble it is, and the
server's log keeps the message.
"""

from __future__ import annotations

import logging
from typing import Any

from memq.errors import (
    BrokerError,
    ConfigError,
    DatabaseMismatch,
    MemqError,
    ModelError,
    StoreError,
    WriterFailed,
)
from memq.problems import from_error

log = logging.getLogger("memq.serve")

INTERNAL = (ConfigError, StoreError, BrokerError, WriterFailed, DatabaseMismatch, ModelError)
"""Errors about the server's own parts."""

INTERNAL_DETAIL = {
    ConfigError: "the server is misconfigured",
    StoreError: "the server's database cannot be read or written right now",
    BrokerError: "the server cannot reach its broker right now",
    WriterFailed: "the server's writer has stopped",
    DatabaseMismatch: "the server's broker belongs to another database",
    ModelError: "the server's embedding model cannot be loaded",
}


def disclosed(exc: MemqError, doing: str) -> dict[str, Any]:
    """The problem details of ``exc`` as a caller may read them; ``doing`` (the request)
    goes to the log with the message of an internal error."""
    body = from_error(exc)
    if isinstance(exc, INTERNAL):
        log.error("%s failed: %s", doing, exc)
        kind = next(k for k in INTERNAL_DETAIL if isinstance(exc, k))
        body["detail"] = f"{INTERNAL_DETAIL[kind]}; its log says why"
    return body
