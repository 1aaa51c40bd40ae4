"""One Redis keyspace, one database: the inbox belongs to the database its writer claimed.

Every database holds a random id, made when it is created (migration 0015). The first
writer to run against a Redis keyspace claims it for its database (``memq:database``:
the id, the file's path, the host, when). From then on:

- a writer whose database has another id refuses to start, naming the database the inbox
  belongs to — two writers with two databases on one Redis would each apply part of the
  stream, and each database would silently miss the rest;
- a client whose database is not the claimed one (or does not exist while the writer's
  does) is told so on its first read, rather than reading a database that never receives
  what it sends (``producers/identity.py``).

A writer whose database really replaces the old one (the old file is gone for good) says
so with ``memq writer --rebind``; its database then receives what the inbox still holds.
The writer claims again at every heartbeat, so a Redis restarted empty is claimed again.
"""

from __future__ import annotations

import os
import socket
from dataclasses import dataclass
from pathlib import Path

import orjson
import redis

from memq import names
from memq.clock import now_rfc3339
from memq.errors import DatabaseMismatch


@dataclass(frozen=True)
class Claim:
    """A database, as the writer that claimed a Redis keyspace for it described it."""

    database_id: str
    path: str
    host: str
    claimed_at: str

    @classmethod
    def of(cls, database_id: str, db_path: str | os.PathLike[str]) -> Claim:
        """A claim for the database ``database_id`` at ``db_path``, on this host, now."""
        return cls(database_id, str(Path(db_path).resolve()), socket.gethostname(),
                   now_rfc3339())

    def describe(self) -> str:
        return f"database {self.database_id} ({self.path} on {self.host})"

    def to_json(self) -> bytes:
        return orjson.dumps({"database_id": self.database_id, "path": self.path,
                             "host": self.host, "claimed_at": self.claimed_at})

    @classmethod
    def from_json(cls, raw: bytes | str) -> Claim:
        """The claim stored in Redis; one memq cannot read names no database."""
        try:
            value = orjson.loads(raw)
            return cls(*(str(value[k]) for k in ("database_id", "path", "host", "claimed_at")))
        except (orjson.JSONDecodeError, TypeError, KeyError):
            return cls("(unreadable)", "?", "?", "?")


def current(connection: redis.Redis) -> Claim | None:
    """The database this keyspace belongs to, if a writer has claimed it."""
    return parse(connection.get(names.DATABASE_KEY))


def parse(raw: bytes | str | None) -> Claim | None:
    """The claim in the value of ``memq:database`` (None: not claimed yet)."""
    return None if raw is None else Claim.from_json(raw)


def bind(connection: redis.Redis, claim: Claim, *, rebind: bool = False, url: str = "") -> None:
    """Claim the keyspace for ``claim``'s database, unless it belongs to another one.

    Raises :class:`DatabaseMismatch`, naming the database it belongs to, unless ``rebind``
    (which takes it over). ``url`` names the Redis in the message.
    """
    if rebind:
        connection.set(names.DATABASE_KEY, claim.to_json())
        return
    if connection.set(names.DATABASE_KEY, claim.to_json(), nx=True):
        return
    owner = current(connection)
    if owner is None:  # deleted between the two commands
        connection.set(names.DATABASE_KEY, claim.to_json(), nx=True)
        return
    if owner.database_id == claim.database_id:
        if (owner.path, owner.host) != (claim.path, claim.host):  # the same database, moved
            connection.set(names.DATABASE_KEY, claim.to_json())
        return
    raise DatabaseMismatch(
        f"Redis {url or 'here'} belongs to {owner.describe()}, claimed {owner.claimed_at}; "
        f"this writer's {claim.describe()} is another database, and two writers on one "
        "inbox would split the data between them. Start the writer on that database, or "
        "give this one its own Redis (or Redis database number); if that database is gone "
        "for good, `memq writer --rebind` binds this Redis to this database (what its inbox "
        "still holds is then applied here).")
