"""memq: the state and memory layer of a multi-agent platform.

What an agent imports::

    from memq import MemoryClient  # or AsyncMemoryClient, for asyncio

    client = MemoryClient.from_env()
    client.append("session-1", "user", "Book the Lisbon flight for March 5th")

The client and its result types live in ``memq.producers``; they are loaded on first use
(PEP 562), so that a worker or the writer importing ``memq.events`` does not pull in the
agent side's dependencies. The errors are cheap and imported at once.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

from memq.errors import (
    AuthenticationFailed,
    BrokerError,
    ConfigError,
    DatabaseMismatch,
    EventsRejected,
    FlushTimeout,
    InvalidEvent,
    MemqError,
    MigrationError,
    ModelError,
    NotFound,
    PermissionDenied,
    ScheduleError,
    StoreError,
    SummariserError,
    ValidationError,
    WriterAlreadyRunning,
)

if TYPE_CHECKING:
    from memq.producers.aio import AsyncMemoryClient
    from memq.producers.client import MemoryClient
    from memq.producers.context import ContextItem
    from memq.producers.documents import FoundDocument
    from memq.producers.macros import MacroSuggestion
    from memq.producers.prefixes import AllowedPrefix
    from memq.producers.remote import RemoteMemoryClient
    from memq.producers.remote_async import AsyncRemoteMemoryClient
    from memq.rejections import Rejection
    from memq.store.read.documents import Document
    from memq.store.read.facts import Fact, FactChange
    from memq.store.read.messages import Message
    from memq.store.read.tasks import Task

__version__ = "0.1.0"

_LAZY = {
    "AllowedPrefix": "memq.producers.prefixes",
    "AsyncMemoryClient": "memq.producers.aio",
    "AsyncRemoteMemoryClient": "memq.producers.remote_async",
    "ContextItem": "memq.producers.context",
    "Document": "memq.store.read.documents",
    "Fact": "memq.store.read.facts",
    "FoundDocument": "memq.producers.documents",
    "FactChange": "memq.store.read.facts",
    "MacroSuggestion": "memq.producers.macros",
    "MemoryClient": "memq.producers.client",
    "Message": "memq.store.read.messages",
    "Rejection": "memq.rejections",
    "RemoteMemoryClient": "memq.producers.remote",
    "Task": "memq.store.read.tasks",
}

__all__ = [
    "AllowedPrefix",
    "AsyncMemoryClient",
    "AsyncRemoteMemoryClient",
    "AuthenticationFailed",
    "BrokerError",
    "ConfigError",
    "ContextItem",
    "DatabaseMismatch",
    "Document",
    "EventsRejected",
    "Fact",
    "FactChange",
    "FlushTimeout",
    "FoundDocument",
    "InvalidEvent",
    "MacroSuggestion",
    "MemoryClient",
    "MemqError",
    "Message",
    "MigrationError",
    "ModelError",
    "NotFound",
    "PermissionDenied",
    "Rejection",
    "RemoteMemoryClient",
    "ScheduleError",
    "StoreError",
    "SummariserError",
    "Task",
    "ValidationError",
    "WriterAlreadyRunning",
    "__version__",
]


def __getattr__(name: str) -> Any:
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module 'memq' has no attribute {name!r}")
    value = getattr(importlib.import_module(module), name)
    globals()[name] = value  # later look-ups skip this function
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(_LAZY))
