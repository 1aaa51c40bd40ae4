"""Fairness between keys: what each may spend per second, and how many calls it may have
running, counted in Redis so that every server of the database shares the count.

One key flooding appends would otherwise fill the inbox that every key's events queue in,
and every other key's turns would wait behind its backlog. A read costs 1, a write 1 per
event it sends (a batch of 100 turns, 100); past its budget a key gets ``RateLimited``
(429, ``Retry-After``) and nothing is sent. The running calls are a counter
(``memq:running:<key>``, with a lifetime so a server that died mid-call gives its places
back). A call is running from before its request body is read (the guard takes its place
and pays its first unit then) until it is answered, and for as long as a change feed it
opened stays open: a key that trickles bodies or keeps streams open spends its own places,
not the server's. The shared tokens are the person's and trusted hosts': never limited here.

**The budget refills continuously** (the generic cell rate algorithm): ``memq:budget:<key>``
holds the time, on Redis' clock, at which everything the key was let spend would have
been paid for at its rate; a call is let in while that time, with the call's own cost
added, is at most :data:`BURST_S` ahead. A key that paused may spend a second's budget
at once; a key that keeps asking gets its calls spread evenly over the second. With a
window per calendar second instead, every flooding key's second of work arrived at the
second's start, at once, and for the next few hundred milliseconds every other key's
turns waited behind it (bench/fairness.py: another key's slowest turns took 3.3-4.7 times
their time alone, against 2.1-2.5 times for the same flood spread evenly).
"""

from __future__ import annotations

import math
import time
from collections.abc import Iterator
from contextlib import AbstractContextManager, contextmanager, nullcontext
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import redis

from memq import broker
from memq.errors import RateLimited
from memq.server.principals import Grant

if TYPE_CHECKING:
    from memq.producers.client import MemoryClient

MAX_KEYS_SEEN = 10_000
RUNNING_TTL_S = 300
"""How long a running call's place is held if its server dies before giving it back."""
BURST_S = 1.0
"""How far ahead of now a key's spending may run: a second's budget at once. A call that
costs more than that is never let in."""

_SPEND = """
local now_parts = redis.call('TIME')
local now = tonumber(now_parts[1]) * 1000 + math.floor(tonumber(now_parts[2]) / 1000)
local held = ARGV[5] == '1'
local running = tonumber(redis.call('GET', KEYS[2]) or '0')
if not held and running >= tonumber(ARGV[3]) then return {2, 0} end
local paid = math.max(tonumber(redis.call('GET', KEYS[1]) or '0'), now)
local after = paid + tonumber(ARGV[1])
if after - now > tonumber(ARGV[2]) then return {1, paid - now} end
redis.call('SET', KEYS[1], string.format('%d', after), 'PX', after - now + 1000)
if not held then
  redis.call('INCR', KEYS[2])
  redis.call('EXPIRE', KEYS[2], ARGV[4])
end
return {0, after - now}
"""
"""KEYS: the key's budget, its running calls; ARGV: the call's cost (0: a place alone) and
:data:`BURST_S` in milliseconds at the key's rate, its calls at once at most, the running count's
lifetime (s), and '1' if the call already holds its running place.
Returns 0 (let in), 1 (over its budget) or 2 (too many calls running), and
how far ahead of Redis' clock the key's spending runs (ms)."""

@dataclass
class _Seen:
    """What this server last learned of a key's budget, for the guard's early refusal."""

    paid_at: float
    """When (``time.monotonic``) everything the key spent is paid for."""
    smallest: int
    """The fewest units of its calls here since ``since``."""
    since: float


class Budgets:
    def __init__(self, connection: redis.Redis, redis_url: str, *, units_per_s: int,
                 concurrent: int) -> None:
        self.redis = connection
        self.redis_url = redis_url
        self.units_per_s = units_per_s
        self.concurrent = concurrent
        self._script = connection.register_script(_SPEND)
        self._seen: dict[str, _Seen] = {}
        """Per key, what its last call here learned of the budget of every server: the
        guard's early refusal needs no read of its own on every call."""

    @classmethod
    def configured(cls, person: MemoryClient) -> Budgets:
        """The budgets of ``[limits]``, counted on ``person``'s Redis: the admin's, as no
        other role may write the counters."""
        limits = person.config.limits
        return cls(person.redis, person.config.redis_url, units_per_s=limits.key_units_per_s,
                   concurrent=limits.key_concurrent)

    @contextmanager
    def spend(self, grant: Grant | None, units: int, *, held: bool = False,
              paid: int = 0) -> Iterator[None]:
        """Hold a running place and ``units`` of the key's budget for one call; ``held``:
        the call holds its place already (``holding``), spend the units alone; ``paid``:
        of them, those paid already by whoever holds its place (:meth:`entering`): only
        the rest is spent, and nothing asked of Redis if none is left."""
        if grant is None:
            yield
            return
        limit = self._limit(grant)
        if units > limit * BURST_S:
            self._saw(grant, units, None)  # its calls like this one: refused at the door
            raise RateLimited(f"this call costs {units} units, more than this key's budget "
                              f"of {limit} a second (a write costs one per event): send "
                              "fewer events per call")
        held = held or paid > 0
        if units > paid:
            self._ask(grant, units - paid, held, size=units)
        else:
            self._saw(grant, units, None)
        with nullcontext() if held else self._giving_back(grant):
            yield

    def entering(self, grant: Grant | None) -> AbstractContextManager[None]:
        """A call's first unit and one of the key's running places, held until it is
        answered, before its size is known (the guard, before a POST's body is read): what
        the server saw of the key's smallest call stays what its calls said, or the
        guard's early refusal would wait for room for one unit, not for its calls."""
        return self._placed(grant, 1)

    def holding(self, grant: Grant | None) -> AbstractContextManager[None]:
        """Hold one of the key's running places, spending none of its budget: while its
        change feed is open. ``RateLimited`` past its bound."""
        return self._placed(grant, 0)

    @contextmanager
    def _placed(self, grant: Grant | None, units: int) -> Iterator[None]:
        """A running place and ``units`` of a call of a size not known, given back after."""
        if grant is None:
            yield
            return
        self._ask(grant, units, held=False, size=None)
        with self._giving_back(grant):
            yield

    def _ask(self, grant: Grant, units: int, held: bool, size: int | None) -> None:
        """Spend ``units`` (and take a running place unless ``held``) in Redis, for a call
        of ``size`` units (None: not known yet); ``RateLimited`` if refused."""
        limit = self._limit(grant)
        with broker.translated(self.redis_url, "counting a key's budget"):
            outcome, ahead_ms = self._script(
                keys=[_budget(grant), _running(grant)],
                args=[_ms(units, limit), _ms(limit * BURST_S, limit),
                      self._concurrent(grant), RUNNING_TTL_S, int(held)])
        if outcome == 2:
            raise RateLimited("this key already has as many calls running as it may; "
                              "retry in a moment")
        self._saw(grant, size, int(ahead_ms) / 1000)
        if outcome == 1:
            wait = int(ahead_ms) / 1000 + units / limit - BURST_S
            raise RateLimited(f"this key is over its budget of {limit} units a second (a "
                              f"write costs one per event): retry in {wait:.2f} s")

    @contextmanager
    def _giving_back(self, grant: Grant) -> Iterator[None]:
        try:
            yield
        finally:
            with broker.translated(self.redis_url, "giving back a key's place"):
                self.redis.decr(_running(grant))

    def renew(self, grant: Grant | None) -> None:
        """Keep the key's running count alive: a place held longer than
        :data:`RUNNING_TTL_S` (an open feed) must not vanish with its count."""
        if grant is not None:
            with broker.translated(self.redis_url, "renewing a key's running calls"):
                self.redis.expire(_running(grant), RUNNING_TTL_S)

    def spent(self, grant: Grant | None) -> bool:
        """Whether ``grant``'s key has no room now for the smallest call it made here in
        the last second, as far as this server saw (by every server, in its own last call);
        no Redis read. A key spent on other servers alone is refused at its call instead,
        once its body is in."""
        seen = None if grant is None else self._seen.get(grant.key_id)
        if grant is None or seen is None:
            return False
        now = time.monotonic()
        smallest = seen.smallest if now - seen.since < BURST_S else 1
        return seen.paid_at - now + smallest / self._limit(grant) > BURST_S

    def _saw(self, grant: Grant, units: int | None, ahead_s: float | None) -> None:
        """A call of ``units`` was judged (None: of a size not known yet); Redis said how
        far ahead the key's spending runs (None: not asked)."""
        if len(self._seen) > MAX_KEYS_SEEN:  # keys idle for long: of no use now
            self._seen.clear()
        now = time.monotonic()
        seen = self._seen.get(grant.key_id)
        if units is None:
            if seen is not None and ahead_s is not None:
                seen.paid_at = now + ahead_s
            return
        if seen is None or now - seen.since >= BURST_S:
            paid_at = now if seen is None else seen.paid_at
            seen = self._seen[grant.key_id] = _Seen(paid_at, units, now)
        if ahead_s is not None:
            seen.paid_at = now + ahead_s
        seen.smallest = min(seen.smallest, units)

    def _limit(self, grant: Grant) -> int:
        return grant.units_per_s or self.units_per_s

    def _concurrent(self, grant: Grant) -> int:
        return grant.concurrent or self.concurrent


def _ms(units: float, limit: int) -> int:
    """``units`` at ``limit`` a second, in whole milliseconds (at least one, unless none)."""
    return max(1, math.ceil(units * 1000 / limit)) if units > 0 else 0


def _budget(grant: Grant) -> str:
    """The key's budget (its delegated tokens spend the same)."""
    return f"memq:budget:{grant.key_id}"


def _running(grant: Grant) -> str:
    return f"memq:running:{grant.key_id}"


def cost(name: str, given: dict[str, Any], writes: bool) -> int:
    """What a call costs: 1, or for a write the events it sends."""
    turns = given.get("turns") if name == "append_many" else None
    return max(1, len(turns)) if writes and isinstance(turns, list) else 1
