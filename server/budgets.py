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

**A server keeps what it took a little while** (``_Held``): a running place its key's
call gave back stays this server's for :data:`LINGER_S`, for the key's next call here,
and when Redis is asked for units it is asked for a twentieth of a second's budget more
(:data:`LEASE_PART`), spent by the key's next calls here within :data:`BURST_S`. Asked on
every call, Redis cost a keyed call two round trips that the shared token never makes,
on the event loop, where every other request waited for them too (bench/serve.py: a
keyed ``get_context`` 16-25% slower at p50; py-spy: all of it those two calls). The bounds
hold all the same: what a server keeps was paid for or counted in Redis, so a key never
spends more than its budget, nor runs more calls than its bound, on every server together;
only, for :data:`LINGER_S`, a place idle on one server is not free on another.
"""

from __future__ import annotations

import atexit
import math
import threading
import time
import weakref
from collections.abc import Iterator
from contextlib import AbstractContextManager, contextmanager, nullcontext, suppress
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import redis

from memq import broker, names
from memq.errors import MemqError, RateLimited
from memq.server.principals import Grant

if TYPE_CHECKING:
    from memq.producers.client import MemoryClient

MAX_KEYS_SEEN = 10_000
RUNNING_TTL_S = 300
"""How long a running call's place is held if its server dies before giving it back."""
BURST_S = 1.0
"""How far ahead of now a key's spending may run: a second's budget at once. A call that
costs more than that is never let in. Units a server took ahead lapse after as long."""
LEASE_PART = 20
"""Asking Redis for units, a server takes this part of a second's budget more, for the
key's next calls here: at most a twentieth of its budget a second lapses unspent."""
MAX_WAITING = 256
"""Events of one key in the keys' queue (sent, not yet relayed to the writer), at most,
before its next write is refused (``[limits] key_queued``): eight times what the relay
lets into the writer's stream at once (``store/write/relay.py``), so a key faster than
the writer keeps it busy without filling the queue, whose first 512 items alone the
relay takes in turn from. While the writer is away, a key queues this many events and
its next writes are refused until it is back: a key cannot fill Redis' memory either."""
QUEUE_PAUSE_S = 0.05
"""After a key's write was refused for its full queue, how long its next writes here are
refused from their headers: a few of the writer's commits, in which its queue drains."""
LINGER_S = 1.0
"""How long a running place a call gave back stays its server's, for the key's next call
there, before it goes back to Redis."""

_SPEND = """
local now_parts = redis.call('TIME')
local now = tonumber(now_parts[1]) * 1000 + math.floor(tonumber(now_parts[2]) / 1000)
local held = ARGV[5] == '1'
local running = tonumber(redis.call('GET', KEYS[2]) or '0')
if not held and running >= tonumber(ARGV[3]) then return {2, 0, 0} end
local paid = math.max(tonumber(redis.call('GET', KEYS[1]) or '0'), now)
local burst = tonumber(ARGV[2])
local after = paid + tonumber(ARGV[1])
if after - now > burst then return {1, paid - now, 0} end
local leased = 0
if after + tonumber(ARGV[6]) - now <= burst then
  after = after + tonumber(ARGV[6])
  leased = 1
end
redis.call('SET', KEYS[1], string.format('%d', after), 'PX', after - now + 1000)
if not held then
  redis.call('INCR', KEYS[2])
  redis.call('EXPIRE', KEYS[2], ARGV[4])
end
return {0, after - now, leased}
"""
"""KEYS: the key's budget, its running calls; ARGV: the call's cost (0: a place alone) and
:data:`BURST_S` in milliseconds at the key's rate, its calls at once at most, the running count's
lifetime (s), '1' if the call already holds its running place, and the units asked for
ahead (ms at the key's rate), taken only if they fit too.
Returns 0 (let in), 1 (over its budget) or 2 (too many calls running), how far ahead of
Redis' clock the key's spending runs (ms), and 1 if the units ahead were taken."""

@dataclass
class _Seen:
    """What this server last learned of a key's budget, for the guard's early refusal."""

    paid_at: float
    """When (``time.monotonic``) everything the key spent is paid for."""
    smallest: int
    """The fewest units of its calls here since ``since``."""
    since: float


@dataclass
class _Held:
    """What this server holds of one key's budget and running places: counted in Redis,
    not spent here yet."""

    units: int = 0
    """Units paid for ahead, for the key's next calls here."""
    lapse_at: float = 0.0
    """When (``time.monotonic``) they lapse."""
    places: int = 0
    """Running places counted in Redis for this server's calls of the key."""
    busy: int = 0
    """Of them, those its running calls hold."""
    freed_at: float = 0.0
    """When one last came free."""
    renewed_at: float = 0.0
    """When the running count's lifetime was last renewed."""

    def take(self, units: int, place: bool, now: float) -> bool:
        """Whether ``units`` (and a running place, if ``place``) are here: taken if so."""
        if now >= self.lapse_at:
            self.units = 0
        if self.units < units or (place and self.busy >= self.places):
            return False
        self.units -= units
        self.busy += place
        return True


class Budgets:
    def __init__(self, connection: redis.Redis, redis_url: str, *, units_per_s: int,
                 concurrent: int, queued: int = MAX_WAITING) -> None:
        self.redis = connection
        self.redis_url = redis_url
        self.units_per_s = units_per_s
        self.concurrent = concurrent
        self.queued = queued
        self._script = connection.register_script(_SPEND)
        self._seen: dict[str, _Seen] = {}
        """Per key, what its last call here learned of the budget of every server: the
        guard's early refusal needs no read of its own on every call."""
        self._held: dict[str, _Held] = {}
        self._queue_refused: dict[str, float] = {}
        """Per key, when (``time.monotonic``) its last write was refused here for its queue."""
        self._lock = threading.Lock()
        self._returner: threading.Thread | None = None
        _LIVE.add(self)

    @classmethod
    def configured(cls, person: MemoryClient) -> Budgets:
        """The budgets of ``[limits]``, counted on ``person``'s Redis: the admin's, as no
        other role may write the counters."""
        limits = person.config.limits
        return cls(person.redis, person.config.redis_url, units_per_s=limits.key_units_per_s,
                   concurrent=limits.key_concurrent, queued=limits.key_queued)

    @contextmanager
    def spend(self, grant: Grant | None, units: int, *, held: bool = False,
              paid: int = 0, writes: bool = False) -> Iterator[None]:
        """Hold a running place and ``units`` of the key's budget for one call; ``held``:
        the call holds its place already (``holding``), spend the units alone; ``paid``:
        of them, those paid already by whoever holds its place (:meth:`entering`): only
        the rest is spent, and nothing asked of Redis if none is left. ``writes``: the
        call sends ``units`` events, refused before anything is spent while the key's
        events already waiting for the writer leave no room for them (``queued``)."""
        if grant is None:
            yield
            return
        if writes:
            self._room_in_queue(grant, units)
        limit = self._limit(grant)
        if units > limit * BURST_S:
            self._saw(grant, units, None)  # its calls like this one: refused at the door
            raise RateLimited(f"this call costs {units} units, more than this key's budget "
                              f"of {limit} a second (a write costs one per event): send "
                              "fewer events per call")
        held = held or paid > 0
        if units > paid:
            self._take(grant, units - paid, place=not held, size=units)
        else:
            self._saw(grant, units, None)
        with nullcontext() if held else self._giving_back(grant):
            yield

    def entering(self, grant: Grant | None) -> AbstractContextManager[None]:
        """A call's first unit and one of the key's running places, held until it is
        answered, before its size is known (the guard, before a POST's body is read): what
        the server saw of the key's smallest call stays what its calls said, or the
        guard's early refusal would wait for room for one unit, not for its calls."""
        return self._placed(grant, 1, linger=True)

    def holding(self, grant: Grant | None) -> AbstractContextManager[None]:
        """Hold one of the key's running places, spending none of its budget: while its
        change feed is open (given back to Redis at once when it closes: a feed's place
        is seldom wanted again at once). ``RateLimited`` past its bound."""
        return self._placed(grant, 0, linger=False)

    @contextmanager
    def _placed(self, grant: Grant | None, units: int, *, linger: bool) -> Iterator[None]:
        """A running place and ``units`` of a call of a size not known, given back after."""
        if grant is None:
            yield
            return
        self._take(grant, units, place=True, size=None)
        with self._giving_back(grant, linger=linger):
            yield

    def _take(self, grant: Grant, units: int, place: bool, size: int | None) -> None:
        """``units`` of the key's budget, and one of its running places if ``place``: from
        what this server holds, or else from Redis; ``RateLimited`` if refused."""
        with self._lock:
            held = self._held.setdefault(grant.key_id, _Held())
            if held.take(units, place, time.monotonic()):
                self._saw(grant, size, None)
                return
            own_place = place and held.busy < held.places
            held.busy += own_place
            here = min(held.units, units)  # spent first: what is held ahead was paid for
            held.units -= here
        try:
            ahead = self._ask(grant, units - here, held=own_place or not place, size=size)
        except BaseException:
            with self._lock:
                held.busy -= own_place
                held.units += here
            raise
        with self._lock:
            # Put back if the idle-place thread forgot it meanwhile (it held nothing then).
            held = self._held.setdefault(grant.key_id, held)
            now = time.monotonic()
            if ahead:
                held.units, held.lapse_at = held.units + ahead, now + BURST_S
            if place and not own_place:
                held.places, held.busy, held.renewed_at = held.places + 1, held.busy + 1, now

    def _ask(self, grant: Grant, units: int, held: bool, size: int | None) -> int:
        """Spend ``units`` (and take a running place unless ``held``) in Redis, for a call
        of ``size`` units (None: not known yet); ``RateLimited`` if refused. The units it
        took ahead, for the key's next calls here."""
        limit = self._limit(grant)
        ahead = limit // LEASE_PART
        with broker.translated(self.redis_url, "counting a key's budget"):
            outcome, ahead_ms, leased = self._script(
                keys=[_budget(grant.key_id), _running(grant.key_id)],
                args=[_ms(units, limit), _ms(limit * BURST_S, limit),
                      self._concurrent(grant), RUNNING_TTL_S, int(held), _ms(ahead, limit)])
        if outcome == 2:
            raise RateLimited("this key already has as many calls running as it may; "
                              "retry in a moment")
        self._saw(grant, size, int(ahead_ms) / 1000)
        if outcome == 1:
            wait = int(ahead_ms) / 1000 + units / limit - BURST_S
            raise RateLimited(f"this key is over its budget of {limit} units a second (a "
                              f"write costs one per event): retry in {wait:.2f} s")
        return ahead if leased else 0

    @contextmanager
    def _giving_back(self, grant: Grant, *, linger: bool = True) -> Iterator[None]:
        """The call's running place, given back after: kept here for the key's next call
        for :data:`LINGER_S` (``linger``), or to Redis at once."""
        try:
            yield
        finally:
            with self._lock:
                held = self._held[grant.key_id]
                held.busy -= 1
                held.freed_at = time.monotonic()
                held.places -= not linger
                if linger and self._returner is None:
                    self._returner = threading.Thread(
                        target=_returning, args=(weakref.ref(self),), daemon=True,
                        name="memq-idle-places")
                    self._returner.start()
            if not linger:
                with broker.translated(self.redis_url, "giving back a key's place"):
                    self.redis.decr(_running(grant.key_id))

    def _room_in_queue(self, grant: Grant, events: int) -> None:
        """``RateLimited`` if the key's events in the keys' queue, with ``events`` more,
        would be over ``queued`` (:data:`MAX_WAITING`). Unbounded, a key sending faster than the
        writer commits (a budget above what the writer takes) made the queue grow without
        end, and another key's turn, beyond the part the relay takes in turn from, waited
        behind all of it: not committed in 30 s (bench/fairness.py)."""
        with broker.translated(self.redis_url, "reading a key's waiting events"):
            pushed, relayed = self.redis.mget(names.key_counter(grant.key_id, "pushed"),
                                              names.key_counter(grant.key_id, "relayed"))
        waiting = int(pushed or 0) - int(relayed or 0)
        if waiting > 0 and waiting + events > self.queued:
            if len(self._queue_refused) > MAX_KEYS_SEEN:
                self._queue_refused.clear()
            self._queue_refused[grant.key_id] = time.monotonic()
            raise RateLimited(f"this key has {waiting} events queued for the writer, and "
                              f"may have {self.queued}: retry once they are taken in")

    def queue_full(self, grant: Grant | None) -> bool:
        """Whether a write of ``grant``'s key was refused here for its full queue in the
        last :data:`QUEUE_PAUSE_S`: its next writes are refused from their headers, not
        after their bodies are read and parsed (a bulk writer sending again at once made
        the server parse 100-turn bodies for nothing, and the writer lost the CPU)."""
        refused_at = None if grant is None else self._queue_refused.get(grant.key_id)
        return refused_at is not None and time.monotonic() - refused_at < QUEUE_PAUSE_S

    def give_back_idle(self, older_than: float | None = None) -> bool:
        """Give back to Redis the running places idle here for ``older_than`` seconds
        (:data:`LINGER_S`), renew the count of those in use, and forget keys this server
        holds nothing of; whether it still holds anything."""
        older_than = LINGER_S if older_than is None else older_than
        now = time.monotonic()
        idle: dict[str, int] = {}
        renew: list[str] = []
        with self._lock:
            for key_id, held in list(self._held.items()):
                spare = held.places - held.busy
                if spare and now - held.freed_at >= older_than:
                    held.places, idle[key_id] = held.busy, spare
                if held.places and now - held.renewed_at >= RUNNING_TTL_S / 3:
                    held.renewed_at = now
                    renew.append(key_id)
                if not held.places and now >= held.lapse_at:
                    del self._held[key_id]
            holding = bool(self._held)
            if not holding:
                self._returner = None
        self._tell_redis(idle, renew)
        return holding

    def give_back_all(self) -> None:
        """Give back every place this server holds, in use or not: its process is ending,
        and no call of it will give its place back."""
        with self._lock:
            for held in self._held.values():
                held.busy = 0
        self.give_back_idle(older_than=0.0)

    def _tell_redis(self, idle: dict[str, int], renew: list[str]) -> None:
        """Redis away: the places lapse with their count's lifetime."""
        if not idle and not renew:
            return
        with suppress(MemqError), broker.translated(self.redis_url, "giving back places"):
            pipe = self.redis.pipeline(transaction=False)  # one round trip for every key
            for key_id, spare in idle.items():
                pipe.decrby(_running(key_id), spare)
            for key_id in renew:
                pipe.expire(_running(key_id), RUNNING_TTL_S)
            pipe.execute()

    def renew(self, grant: Grant | None) -> None:
        """Keep the key's running count alive: a place held longer than
        :data:`RUNNING_TTL_S` (an open feed) must not vanish with its count."""
        if grant is not None:
            with broker.translated(self.redis_url, "renewing a key's running calls"):
                self.redis.expire(_running(grant.key_id), RUNNING_TTL_S)

    def spent(self, grant: Grant | None) -> bool:
        """Whether ``grant``'s key has no room now for the smallest call it made here in
        the last second, as far as this server saw (by every server, in its own last call);
        no Redis read. A key spent on other servers alone is refused at its call instead,
        once its body is in. Units this server holds ahead are room too."""
        seen = None if grant is None else self._seen.get(grant.key_id)
        if grant is None or seen is None:
            return False
        now = time.monotonic()
        smallest = seen.smallest if now - seen.since < BURST_S else 1
        held = self._held.get(grant.key_id)
        if held is not None and held.units >= smallest and now < held.lapse_at:
            return False
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


def _budget(key_id: str) -> str:
    """The key's budget (its delegated tokens spend the same)."""
    return f"memq:budget:{key_id}"


def _running(key_id: str) -> str:
    return f"memq:running:{key_id}"


_LIVE: weakref.WeakSet[Budgets] = weakref.WeakSet()


@atexit.register
def _give_back_all() -> None:
    """At a process's end (memq serve stopped, restarted), the places its servers kept for
    their keys' next calls go back to Redis: left, each would stay counted until its
    count's lifetime ran out (:data:`RUNNING_TTL_S`), and a key of one call at once would
    be refused on every server for minutes. (A process killed outright leaves them so.)"""
    for budgets in list(_LIVE):
        with suppress(Exception):  # the process ends all the same
            budgets.give_back_all()


def _returning(budgets: weakref.ref[Budgets]) -> None:
    """A server's thread that gives back the places idle for :data:`LINGER_S`, while it
    holds any (a weak reference: a server's budgets dropped take their thread along)."""
    while True:
        time.sleep(LINGER_S / 2)
        alive = budgets()
        if alive is None or not alive.give_back_idle():
            return
        del alive


def cost(name: str, given: dict[str, Any], writes: bool) -> int:
    """What a call costs: 1, or for a write the events it sends."""
    turns = given.get("turns") if name == "append_many" else None
    return max(1, len(turns)) if writes and isinstance(turns, list) else 1
