"""The one error tree of memq.

Every error memq raises on purpose derives from :class:`MemqError`; storage and Redis
errors are translated into it once, at the boundary, with ``raise ... from``::

    MemqError
    ├── ConfigError              bad memq.toml / environment
    ├── ValidationError          a caller's bad argument; nothing was sent or stored
    │   ├── InvalidEvent         an event that cannot be applied (reason is kept)
    │   └── ScheduleError        a schedule text that cannot be parsed
    ├── NotFound                 a task, macro, rejected event... that does not exist
    ├── StoreError               the database cannot be read or written
    │   ├── WriterAlreadyRunning another writer owns the database
    │   └── MigrationError       the schema cannot be brought up to date
    ├── BrokerError              Redis cannot be reached or answered an error
    ├── FlushTimeout             the writer did not commit in time
    ├── ModelError               the embedding model files are missing or corrupt
    └── SummariserError          no usable summary: the messages stay unconsolidated

The CLI turns a ``MemqError`` into its one-line message and exit code 1.
"""

from __future__ import annotations


class MemqError(Exception):
    """Base of every error memq raises on purpose."""

    exit_code = 1


class ConfigError(MemqError):
    """The configuration file or environment holds a value memq cannot use."""


class ValidationError(MemqError, ValueError):
    """An argument is not acceptable; nothing was sent or stored."""


class InvalidEvent(ValidationError):
    """An event does not match the vocabulary: bad shape, unknown type or version."""


class ScheduleError(ValidationError):
    """A schedule text that memq cannot turn into a cron expression."""


class NotFound(MemqError, LookupError):
    """The thing named does not exist."""


class StoreError(MemqError):
    """The database cannot be opened, read or written."""


class WriterAlreadyRunning(StoreError):
    """A second writer tried to open a database that another writer owns."""


class MigrationError(StoreError):
    """The schema cannot be brought up to date."""


class BrokerError(MemqError):
    """Redis cannot be reached, or it refused a command."""


class FlushTimeout(MemqError, TimeoutError):
    """The writer did not commit everything in the time given."""


class ModelError(MemqError):
    """The embedding model files are missing, incomplete or do not match their checksum."""


class SummariserError(MemqError):
    """The summariser failed (a remote model erred, timed out or answered garbage) or its
    summary was rejected by the guard rails; the messages stay unconsolidated."""
