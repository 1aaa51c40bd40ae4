"""The one error tree of memq.

Every error memq raises on purpose derives from :class:`MemqError`; storage and Redis
errors are translated into it once, at the boundary, with ``raise ... from``::

    MemqError
    ├── ConfigError              bad memq.toml / environment
    ├── ValidationError          a caller's bad argument; nothing was sent or stored
    │   ├── InvalidEvent         an event that cannot be applied (reason is kept)
    │   └── ScheduleError        a schedule text that cannot be parsed
    ├── NotFound                 a task, macro, rejected event... that does not exist
    ├── PermissionDenied         the role this process runs as may not do that
    ├── AuthenticationFailed     no bearer token, or one `memq serve` did not issue
    ├── StoreError               the database cannot be read or written
    │   ├── WriterAlreadyRunning another writer owns the database
    │   └── MigrationError       the schema cannot be brought up to date
    ├── WriterFailed             a thread of the writer died: the writer stops (and says so)
    ├── BrokerError              Redis (or memq serve) cannot be reached or answered an error
    ├── FlushTimeout             the writer did not commit in time
    ├── EventsRejected           the writer rejected events a client sent (flush says which)
    ├── DatabaseMismatch         Redis belongs to another database than this process's
    ├── ModelError               the embedding model files are missing or corrupt
    └── SummariserError          no usable summary: the messages stay unconsolidated

The CLI turns a ``MemqError`` into its one-line message and its ``exit_code``: 2 for a
``ValidationError`` (the command line asked for something memq refuses: a bad schedule,
id or option combination -- a usage error, as argparse's own), 1 for everything else,
an ``InvalidEvent`` included (a stored or queued event is not the command line's fault).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from memq.rejections import Rejection


class MemqError(Exception):
    """Base of every error memq raises on purpose."""

    exit_code = 1


class ConfigError(MemqError):
    """The configuration file or environment holds a value memq cannot use."""


class ValidationError(MemqError, ValueError):
    """An argument is not acceptable; nothing was sent or stored."""

    exit_code = 2


class InvalidEvent(ValidationError):
    """An event does not match the vocabulary: bad shape, unknown type or version."""

    exit_code = 1


class ScheduleError(ValidationError):
    """A schedule text that memq cannot turn into a cron expression."""


class NotFound(MemqError, LookupError):
    """The thing named does not exist."""


class PermissionDenied(MemqError, PermissionError):
    """The role these credentials hold (agent, worker) may not do that: an admin operation
    asked of an agent, or a command Redis refused with NOPERM. Nothing was sent."""


class AuthenticationFailed(MemqError):
    """An HTTP request to ``memq serve`` carried no bearer token, or not one of the server's
    (``agent.token`` / ``admin.token``); HTTP 401."""


class StoreError(MemqError):
    """The database cannot be opened, read or written."""


class WriterAlreadyRunning(StoreError):
    """A second writer tried to open a database that another writer owns."""


class MigrationError(StoreError):
    """The schema cannot be brought up to date."""


class WriterFailed(MemqError):
    """One of the writer's threads died of a bug; the whole writer stops rather than keep a
    heartbeat that claims it works, so that ``memq status`` and its supervisor see it."""


class BrokerError(MemqError):
    """Redis cannot be reached, or it refused a command (for a remote client: ``memq serve``
    cannot be reached)."""


class FlushTimeout(MemqError, TimeoutError):
    """The writer did not commit everything in the time given."""


class Busy(MemqError):
    """The server already holds as many waits (flushes) as it allows; try again shortly."""


class RateLimited(MemqError):
    """This key has spent its budget for now (``[limits] key_units_per_s``, or the key's
    own); try again in the time its message gives, at most a second."""


class EventsRejected(MemqError):
    """The writer set aside events this client sent; ``rejections`` says which and why.

    They are in ``memq rejected list`` too, where an operator can fix and replay them.
    """

    def __init__(self, message: str, rejections: Sequence[Rejection] = ()) -> None:
        super().__init__(message)
        self.rejections: tuple[Rejection, ...] = tuple(rejections)


class DatabaseMismatch(MemqError):
    """This Redis keyspace belongs to another database than the one this process uses: a
    writer would split the data between two databases, a client would never read back
    what it sends. The message names both."""


class FeedExpired(MemqError):
    """A change feed's follower asked from a position retention has since deleted events
    after: it would miss them. ``horizon`` is the oldest position it may resume from."""

    def __init__(self, message: str, horizon: int = 0) -> None:
        super().__init__(message)
        self.horizon = horizon


class ModelError(MemqError):
    """The embedding model files are missing, incomplete or do not match their checksum."""


class SummariserError(MemqError):
    """The summariser failed (a remote model erred, timed out or answered garbage) or its
    summary was rejected by the guard rails; the messages stay unconsolidated."""
