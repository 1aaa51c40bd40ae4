"""Is the database this client reads the one its Redis's writer writes?

A client sends to a Redis and reads a database file; if the writer on that Redis writes
another database (see ``memq/identity.py``), nothing the client sends ever shows up in its
reads. So the client's reads check once, on the first borrow that can tell, and raise
:class:`~memq.errors.DatabaseMismatch` naming both databases if they differ. Until it can
tell — no writer has claimed the Redis yet, Redis cannot be reached, the database is being
created or migrated — reads go on and it asks again at most once a second; once the two
agree it never asks again.
"""

from __future__ import annotations

import logging
import os
import threading
import time
from pathlib import Path

import redis
import redis.asyncio

from memq import identity, names
from memq.broker import translated
from memq.errors import BrokerError, DatabaseMismatch, PermissionDenied
from memq.logs import log, redact_url
from memq.store.read.identity import database_id
from memq.store.read.pool import Reader

logger = logging.getLogger("memq.client")

RECHECK_S = 1.0
"""How often an undecided check asks Redis again."""

UNREACHABLE_RECHECK_S = 30.0
"""... and how long it waits after Redis did not answer (a read must not wait on it often)."""


class _Undecided(Exception):
    """No claim to decide on now: ask again in ``retry_after_s``."""

    def __init__(self, retry_after_s: float) -> None:
        super().__init__(retry_after_s)
        self.retry_after_s = retry_after_s


class DatabaseVet:
    """The vet of a client's read pool (``ReadPool(vet=...)``): True once they agree.

    Where the claim comes from is the subclass's: :class:`DatabaseCheck` asks Redis from
    inside the read, :class:`AsyncDatabaseCheck` is handed what the event loop asked.
    """

    def __init__(self, url: str, db_path: str | os.PathLike[str]) -> None:
        self.url = url
        self.db_path = Path(db_path)
        self.agreed = False
        self._next_check = 0.0
        self._mismatch: DatabaseMismatch | None = None
        self._warned = False
        self._lock = threading.Lock()

    def __call__(self, conn: Reader | None) -> bool:
        with self._lock:
            if time.monotonic() < self._next_check:
                if self._mismatch is not None:
                    raise self._mismatch
                return False
            self._next_check = time.monotonic() + RECHECK_S
            self._mismatch = None
            try:
                claim = self._claim()
            except _Undecided as later:
                self._next_check = time.monotonic() + later.retry_after_s
                return False
            self.agreed = self._decide(claim, conn)
            return self.agreed

    def _claim(self) -> identity.Claim | None:
        raise NotImplementedError

    def _decide(self, claim: identity.Claim | None, conn: Reader | None) -> bool:
        if claim is None:
            self._warn_unclaimed()
            return False
        if conn is None:
            if self.db_path.exists():
                return False  # being created or migrated here: decide once it is ready
            self._refuse(claim, f"{self.db_path}, which does not exist")
        ours = database_id(conn) if conn is not None else None
        if ours == claim.database_id:
            return True
        self._refuse(claim, f"database {ours} ({self.db_path})")
        return False

    def _warn_unclaimed(self) -> None:
        """Once: a Redis no writer has claimed may be nobody's memq (another service on the
        default port, say), and what is sent there is never committed."""
        if self._warned:
            return
        self._warned = True
        log(logger, "no memq writer has claimed this Redis yet: what this client sends waits "
            "there until `memq writer` (or `memq up`) runs against it; is it the Redis you "
            "meant?", logging.WARNING, redis=redact_url(self.url), db=str(self.db_path))

    def _refuse(self, claim: identity.Claim, ours: str) -> None:
        self._mismatch = DatabaseMismatch(
            f"this client reads {ours}, but the writer on Redis {redact_url(self.url)} "
            f"writes {claim.describe()}: what this client sends goes there, and it would "
            "never read it back. Point db_path (MEMQ_DB) at that database, or redis_url "
            "(MEMQ_REDIS_URL) at this database's Redis.")
        raise self._mismatch


class DatabaseCheck(DatabaseVet):
    """Asks Redis which database it belongs to, from inside the read that needs it."""

    def __init__(self, connection: redis.Redis, url: str, db_path: str | os.PathLike[str]
                 ) -> None:
        super().__init__(url, db_path)
        self.redis = connection

    def _claim(self) -> identity.Claim | None:
        try:
            with translated(self.url, "reading which database this Redis belongs to"):
                return identity.current(self.redis)
        except (BrokerError, PermissionDenied):
            # A read must not fail because Redis is away (or its ACL, set up by an older
            # memq, does not let agents read the claim yet: `memq acl apply`): decide later.
            raise _Undecided(UNREACHABLE_RECHECK_S) from None


class AsyncDatabaseCheck(DatabaseVet):
    """The async client's: :meth:`prepare` asks Redis on the event loop before a read, and
    the read (in a worker thread) decides on that answer."""

    def __init__(self, connection: redis.asyncio.Redis, url: str,
                 db_path: str | os.PathLike[str]) -> None:
        super().__init__(url, db_path)
        self.redis = connection
        self._offered: list[identity.Claim | _Undecided | None] = []

    async def prepare(self) -> None:
        """Ask Redis now if the next read will want its answer."""
        with self._lock:
            if self.agreed or self._offered or time.monotonic() < self._next_check:
                return
        answer: identity.Claim | _Undecided | None
        try:
            with translated(self.url, "reading which database this Redis belongs to"):
                answer = identity.parse(await self.redis.get(names.DATABASE_KEY))
        except (BrokerError, PermissionDenied):
            answer = _Undecided(UNREACHABLE_RECHECK_S)  # as DatabaseCheck
        with self._lock:
            self._offered = [answer]

    def _claim(self) -> identity.Claim | None:
        if not self._offered:
            raise _Undecided(0.0)  # not asked yet: the next read's prepare() asks
        answer = self._offered.pop()
        if isinstance(answer, _Undecided):
            raise answer
        return answer
