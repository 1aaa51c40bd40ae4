"""Who is calling: a presented bearer token resolved to a principal.

Two kinds of token reach the server. The shared ones (``agent.token``, ``admin.token``,
:mod:`memq.tokens`) stand for a whole role: every user's memory. An API key
(``memq keys create``) stands for its grant: the users and agents it names and what it may
do there, which :mod:`memq.server.grants` enforces on every call. A key acts with the
agent role's Redis credentials, so its events are an agent's, whatever its grant.

Keys are read from the database and each is kept at most :data:`KEY_TTL_S`: a key revoked
or expired is refused by every server within a second, without a message between them.
"""

from __future__ import annotations

import hashlib
import hmac
import threading
import time
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass
from typing import Generic, TypeVar

from memq import narrowing, tenants
from memq.authority import Role
from memq.clock import now_rfc3339
from memq.producers.keys import TOKEN, digest
from memq.server.delegation import Delegations
from memq.store.read.keys import ApiKey, key_with_digest
from memq.store.read.pool import ReadPool
from memq.tokens import Tokens

KEY_TTL_S = 0.5
MAX_CACHED_KEYS = 10_000

V = TypeVar("V")

Lookup = Callable[[str], tuple[ApiKey, str] | None]
"""key id -> the key and its secret's digest, or None."""


@dataclass(frozen=True)
class Grant:
    """What a key's bearer may reach: ``None`` for every user (or agent)."""

    key_id: str
    users: frozenset[str] | None
    agents: frozenset[str] | None
    rights: frozenset[str]
    delegated: bool = False
    """A delegated token's (its key's id, a narrower grant)."""
    units_per_s: int | None = None
    concurrent: int | None = None
    """The key's own budget (``server/budgets.py``); None: the configured one."""
    narrowed: str | None = None
    """A delegated token's own narrowing of its key, as its events carry it."""
    tenant: str = tenants.DEFAULT
    """Whose ids it reaches (:mod:`memq.tenants`): ``users`` and ``agents`` are its names."""

    @property
    def mark(self) -> str:
        """What its events carry to the writer: the key's id, and a delegated token's
        narrowing of it (:mod:`memq.narrowing`), so the writer checks the same grant."""
        return self.key_id if self.narrowed is None else f"{self.key_id}:{self.narrowed}"

    @property
    def everyone(self) -> bool:
        """Every user and agent: only what it may do is limited."""
        return self.users is None and self.agents is None


@dataclass(frozen=True)
class Principal:
    role: Role
    grant: Grant | None = None
    """None: a shared token, the role's every right."""

    @property
    def name(self) -> str:
        """Stable per principal: the remote clients and their senders are keyed on it."""
        if self.grant is None:
            return self.role.value
        if self.grant.narrowed is None:
            return f"key-{self.grant.key_id}"
        # A delegated token is its own caller: never the key's remote client, whose grant is
        # wider, whatever client id it sends. The digest is the same on every server.
        shape = hashlib.sha256(self.grant.narrowed.encode()).hexdigest()[:16]
        return f"key-{self.grant.key_id}-{shape}"


class _Kept(Generic[V]):
    """Values by name, each kept ``ttl_s`` seconds; past :data:`MAX_CACHED_KEYS` the least
    recently used go."""

    def __init__(self, ttl_s: float) -> None:
        self.ttl_s = ttl_s
        self._items: OrderedDict[str, tuple[float, V]] = OrderedDict()
        self._lock = threading.Lock()

    def get(self, name: str, now: float) -> tuple[V] | None:
        """``(value,)`` if kept and fresh at ``now``, else None."""
        with self._lock:
            kept = self._items.get(name)
        return (kept[1],) if kept is not None and now - kept[0] < self.ttl_s else None

    def put(self, name: str, value: V, now: float) -> None:
        with self._lock:
            self._items[name] = (now, value)
            self._items.move_to_end(name)
            while len(self._items) > MAX_CACHED_KEYS:
                self._items.popitem(last=False)


class KeyRing:
    """The keys, each read again once it is :data:`KEY_TTL_S` old."""

    def __init__(self, lookup: Lookup, ttl_s: float = KEY_TTL_S) -> None:
        self._lookup = lookup
        self.ttl_s = ttl_s
        self._rows: _Kept[tuple[ApiKey, str] | None] = _Kept(ttl_s)
        self._granted: _Kept[Grant] = _Kept(ttl_s)
        """Per secret presented, its grant: only keys' real secrets, in memory only (as
        the shared tokens are), so a hit costs no digest."""

    def grant_of(self, presented: str) -> Grant | None:
        """The grant of a live key whose secret this is, or None. A grant found is kept
        as long as the key's row: one request asks for it several times (the guard's
        checks, its route), and a revocation is seen as soon as before."""
        now = time.monotonic()
        if (kept := self._granted.get(presented, now)) is not None:
            return kept[0]
        match = TOKEN.fullmatch(presented)
        if match is None:
            return None
        found = self._key(match.group(1))
        if found is None or not hmac.compare_digest(digest(presented), found[1]) \
                or not _live(found[0]):
            return None
        grant = grant_of(found[0])
        self._granted.put(presented, grant, now)
        return grant

    def live(self, key_id: str) -> ApiKey | None:
        """The key if it is neither revoked nor expired."""
        found = self._key(key_id)
        return found[0] if found is not None and _live(found[0]) else None

    def _key(self, key_id: str) -> tuple[ApiKey, str] | None:
        now = time.monotonic()
        if (kept := self._rows.get(key_id, now)) is not None:
            return kept[0]
        found = self._lookup(key_id)
        self._rows.put(key_id, found, now)
        return found


def _live(key: ApiKey) -> bool:
    return key.revoked_at is None and (key.expires_at is None
                                       or key.expires_at > now_rfc3339())


def keys_in(readers: ReadPool) -> Lookup:
    """Keys read through ``readers`` (an empty database until the writer made it)."""
    def lookup(key_id: str) -> tuple[ApiKey, str] | None:
        with readers.connection() as conn:
            return key_with_digest(conn, key_id)
    return lookup


def grant_of(key: ApiKey) -> Grant:
    return Grant(key.id, _set(key.users), _set(key.agents), frozenset(key.rights),
                 units_per_s=key.units_per_s, concurrent=key.concurrent, tenant=key.tenant)


def _set(ids: tuple[str, ...] | None) -> frozenset[str] | None:
    return None if ids is None else frozenset(ids)


class Principals:
    """The server's door: a token to its principal, or None."""

    def __init__(self, tokens: Tokens, keys: KeyRing, delegations: Delegations, *,
                 require_keys: bool = False) -> None:
        self.tokens = tokens
        self.keys = keys
        self.delegations = delegations
        self.require_keys = require_keys

    def principal(self, presented: str) -> Principal | None:
        role = self.tokens.role_of(presented)
        if role is not None:
            # With require_keys, agents come with keys of their own; the person keeps theirs.
            return None if self.require_keys and role is Role.AGENT else Principal(role)
        grant = self.keys.grant_of(presented) or self._delegated(presented)
        return None if grant is None else Principal(Role.AGENT, grant)

    def _delegated(self, presented: str) -> Grant | None:
        """A delegated token's grant: what it names of what its key still reaches."""
        token = self.delegations.read(presented)
        key = None if token is None else self.keys.live(token.key_id)
        if token is None or key is None:
            return None
        parent = grant_of(key)
        return Grant(key.id, _within(token.users, parent.users),
                     _within(token.agents, parent.agents),
                     token.rights & parent.rights - {"delegate"}, delegated=True,
                     units_per_s=parent.units_per_s, concurrent=parent.concurrent,
                     narrowed=narrowing.encode(token.users, token.agents, token.rights),
                     tenant=parent.tenant)

    def holder_of(self, presented: str) -> str | None:
        """Whose places among the bodies being read a token takes: its key's (a delegated
        token's too, so minting tokens gains no places); None: no one's share, the places
        every caller shares alone (a shared role's token: the deployment's own agents, or
        the person, whom one share of 8 would throttle)."""
        found = self.principal(presented)
        if found is None or found.grant is None:
            return None
        return f"key-{found.grant.key_id}"

    def role_of(self, presented: str) -> Role | None:
        """As :meth:`Tokens.role_of`, for the guard's check before a body is read."""
        found = self.principal(presented)
        return None if found is None else found.role


def _within(asked: frozenset[str] | None, granted: frozenset[str] | None
            ) -> frozenset[str] | None:
    if asked is None:
        return granted
    return asked if granted is None else asked & granted
