"""One client per remote caller, sharing the reads of its role's client.

A remote client names itself with the ``Memq-Client-Id`` header (RemoteMemoryClient sends
a random one); callers that send none (curl) share one per token. Each gets
:meth:`MemoryClient.with_own_outbox`: its ``flush`` waits for what *it* sent and reports
*its* rejections, while the read pool, caches and working memory stay one per role.

Nothing of that needs to live in this process. The outbox's sender id (under which the
writer reports rejections) is derived from the role and the client id, and every write's
answer carries the inbox position it reached (``Memq-Sent``), which the client sends back
with its flush. So a flush is right on any server of the database and after a restart,
and when the newest :data:`MAX_REMOTES` callers push an older one out of this table: it
comes back with the same sender and its position.

The same holds inside one server: a caller's waits (flush, forget/wait) run on a second
client of the same sender, :attr:`Remote.waiter`, never on the one its writes go through.
So a wait holds nothing its writes need (they go on while it waits), and a wait that has to
queue behind another of the same caller (one at a time reads and reports its rejections)
queues only for its own timeout.
"""

from __future__ import annotations

import hashlib
import re
import threading
import time
from collections import OrderedDict
from collections.abc import Iterator
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass, field

from fastapi import Depends, Header, Request
from fastapi.security import HTTPAuthorizationCredentials, HTTPBearer

from memq.authority import Role
from memq.errors import AuthenticationFailed, Busy, FlushTimeout, ValidationError
from memq.inbox import Position, inbox_end, key_end, stream_position
from memq.names import KEY_POSITION_BASE
from memq.producers.client import MemoryClient
from memq.producers.outbox import Outbox
from memq.rejections import sent_as
from memq.server import grants
from memq.server.budgets import Budgets
from memq.server.principals import Grant, Principal, Principals

MAX_REMOTES = 10_000
MAX_WAITS = 8
"""Waits (flushes) one shared token's callers may hold at once: a wait can last minutes and
holds a server thread (about 40 in all), so beyond this a caller gets ``Busy`` (503) at
once. An API key's callers have half as many places (its delegated tokens share them), and
all keys together twice as many: one key holding every place of its own leaves the other
keys', and the shared tokens' places are never a key's."""
MAX_QUEUED = 2
"""Waits one caller may have at once, the one running and one queued behind it: its
waits run one at a time, so more would hold server threads for nothing."""
MAX_CLAIMED = 10_000
CLIENT_ID = re.compile(r"[A-Za-z0-9_-]{1,64}")

bearer = HTTPBearer(auto_error=False, description="agent.token or admin.token")
BEARER = Depends(bearer)
CLIENT_ID_HEADER = Header(default=None, alias="Memq-Client-Id",
                          description="the remote client's own id (its flushes)")


@dataclass
class Remote:
    """A caller's clients: ``client`` for its writes, kept in order by ``lock``, and
    ``waiter``, of the same sender, for its waits, one at a time (``turn``)."""

    client: MemoryClient
    waiter: MemoryClient
    waits: tuple[threading.BoundedSemaphore, ...]
    """Its token's places among the server's waits: the token's own, and all keys' too."""
    grant: Grant | None = None
    """What the caller's key reaches (None: a shared token, its role's every right)."""
    budgets: Budgets | None = None
    """Where a key's calls are counted (``budgets.py``)."""
    claimed: set[str] = field(default_factory=set)
    """Sessions this caller started with a key, which it may read before they commit."""

    def claim(self, sessions: list[str]) -> None:
        if len(self.claimed) > MAX_CLAIMED:  # committed by now, as a rule: read from disk
            self.claimed.clear()
        self.claimed.update(sessions)
    lock: threading.Lock = field(default_factory=threading.Lock)
    turn: threading.Lock = field(default_factory=threading.Lock)
    queued: threading.BoundedSemaphore = field(
        default_factory=lambda: threading.BoundedSemaphore(MAX_QUEUED))

    @contextmanager
    def waiting(self, timeout: float, sent: str | None) -> Iterator[float]:
        """Its turn among its caller's waits (at most :data:`MAX_QUEUED`, or ``Busy`` now),
        or ``FlushTimeout`` once ``timeout`` has passed; only then a place among its
        token's waits, or ``Busy`` now: never queued for one, so one caller's queued waits
        hold no place another caller could use. Yields the seconds left, ``waiter`` set to
        wait for ``sent`` and for all ``client`` sent."""
        deadline = time.monotonic() + timeout
        if not self.queued.acquire(blocking=False):
            raise Busy("this client already has as many flushes waiting as it may; "
                       "retry in a moment")
        try:
            with self._turn(timeout), self._place():
                self._expect(sent)
                yield max(0.0, deadline - time.monotonic())
        finally:
            self.queued.release()

    @contextmanager
    def _turn(self, timeout: float) -> Iterator[None]:
        if not self.turn.acquire(timeout=timeout):
            raise FlushTimeout(f"another flush of this client was still waiting after "
                               f"{timeout:g} s (they wait one at a time)")
        try:
            yield
        finally:
            self.turn.release()

    @contextmanager
    def _place(self) -> Iterator[None]:
        with ExitStack() as held:
            for places in self.waits:
                if not places.acquire(blocking=False):
                    raise Busy("this server already waits on as many flushes for this token "
                               "as it allows; retry in a moment")
                held.callback(places.release)
            yield

    def _expect(self, sent: str | None) -> None:
        outbox = self.waiter.outbox
        position = None if sent is None else stream_position(sent)
        if position is not None and (outbox.acting_for is None
                                     or position[0] >= KEY_POSITION_BASE):
            # (Below the base, for a key: an ordinal from before keys were counted, which
            # a client alive across the upgrade kept: long committed, nothing to wait for.)
            end = _end_of(outbox)
            if position > end:
                raise ValidationError(
                    f"Memq-Sent {sent:.45} is beyond what was ever sent ({end[0]}-{end[1]}): "
                    "a flush can only wait for what a write answered")
            outbox.expect(position)
        written = self.client.outbox.last_sent  # one read of a tuple: no lock needed
        if written is not None:
            outbox.expect(written)


def _end_of(outbox: Outbox) -> Position:
    """How far what was sent on the outbox's inbox reaches (for a key: its own count)."""
    if outbox.acting_for is not None:
        return key_end(outbox.redis, sent_as(outbox.sender, outbox.acting_for))
    return inbox_end(outbox.redis, outbox.stream)


def sender_of(principal: str, client_id: str) -> str:
    """The sender id of a remote client's events: the same on every server, every time."""
    return hashlib.sha256(f"memq serve\0{principal}\0{client_id}".encode()).hexdigest()[:32]


class Remotes:
    def __init__(self, bases: dict[Role, MemoryClient], cap: int = MAX_REMOTES,
                 max_waits: int = MAX_WAITS, budgets: Budgets | None = None) -> None:
        self.bases = bases
        self.budgets = budgets
        self.cap = cap
        # Per role, so agents holding every place never keep the admin from flushing.
        self.waits = {role: threading.BoundedSemaphore(max_waits) for role in bases}
        self.all_keys_waits = threading.BoundedSemaphore(2 * max_waits)
        self.places_per_key = max(1, max_waits // 2)
        self._places: OrderedDict[str, threading.BoundedSemaphore] = OrderedDict()
        self._remotes: OrderedDict[tuple[str, str], Remote] = OrderedDict()
        self._lock = threading.Lock()

    def get(self, principal: Principal, client_id: str | None) -> Remote:
        if client_id is not None and not CLIENT_ID.fullmatch(client_id):
            raise ValidationError(
                "Memq-Client-Id must be 1 to 64 letters, digits, '-' or '_'")
        key = (principal.name, client_id or "")
        with self._lock:
            remote = self._remotes.get(key)
            if remote is None:
                # A key reads through its role's client (one pool, one set of caches and
                # one model per role) and sends on the keys' queue, which the admin's
                # credentials alone may push: judged there with an agent's rights and the
                # key's grant.
                base = self.bases[principal.role]
                sender = self.bases[Role.ADMIN] if principal.grant else base
                # A key's client is private: another key's uncommitted turns and claims
                # are never read through it. Its waiter shares them (it waits for them).
                client = base.with_own_outbox(sender, private=principal.grant is not None)
                waiter = client.with_own_outbox(sender)
                client.outbox.sender = waiter.outbox.sender = sender_of(*key)
                if principal.grant is not None:  # the writer checks and records the key
                    grants.as_key(client, principal.grant)
                    grants.as_key(waiter, principal.grant)
                remote = self._remotes[key] = Remote(client, waiter, self._waits(principal),
                                                     grant=principal.grant,
                                                     budgets=self.budgets)
                while len(self._remotes) > self.cap:
                    self._remotes.popitem(last=False)
            else:
                self._remotes.move_to_end(key)
            return remote

    def _waits(self, principal: Principal) -> tuple[threading.BoundedSemaphore, ...]:
        """A shared token's places, or a key's own (its delegated tokens' too) and all
        keys'. (Under ``_lock``.)"""
        if principal.grant is None:
            return (self.waits[principal.role],)
        key_id = principal.grant.key_id
        places = self._places.get(key_id)
        if places is None:
            places = self._places[key_id] = threading.BoundedSemaphore(self.places_per_key)
            while len(self._places) > self.cap:  # a key forgotten holds no place for long
                self._places.popitem(last=False)
        self._places.move_to_end(key_id)
        return (places, self.all_keys_waits)


def caller(
    request: Request,
    credentials: HTTPAuthorizationCredentials | None = BEARER,
    client_id: str | None = CLIENT_ID_HEADER,
) -> Remote:
    """The client a request runs on: its token's principal, its own outbox."""
    principals: Principals = request.app.state.principals
    found = None if credentials is None else principals.principal(credentials.credentials)
    if found is None:
        raise AuthenticationFailed(
            "a bearer token is needed: a key (memq keys create), or agent.token or "
            "admin.token beside the database" if credentials is None
            else "this bearer token is not one this server issued, or it was revoked or "
                 "has expired")
    remotes: Remotes = request.app.state.remotes
    return remotes.get(found, client_id)
