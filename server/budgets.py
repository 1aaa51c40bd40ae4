"""Fairness between keys: what each may spend per second, and how many calls it may have
running, counted in Redis so that every server of the database shares the count.

One key flooding appends would otherwise fill the inbox that every key's events queue in,
and every other key's turns would wait behind its backlog. A read costs 1, a write 1 per
event it sends (a batch of 100 turns, 100); past its budget a key gets ``RateLimited``
(429, ``Retry-After: 1``) and nothing is sent. The budget is a one-second window
(``memq:budget:<key>:<second>``), the running calls a counter
(``memq:running:<key>``, with a lifetime so a server that died mid-call gives its places
back). The shared tokens are the person's and trusted hosts': never limited here.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import redis

from memq import broker
from memq.errors import RateLimited
from memq.server.principals import Grant

MAX_WINDOWS_SEEN = 10_000
RUNNING_TTL_S = 300
"""How long a running call's place is held if its server dies before giving it back."""


class Budgets:
    def __init__(self, connection: redis.Redis, redis_url: str, *, units_per_s: int,
                 concurrent: int) -> None:
        self.redis = connection
        self.redis_url = redis_url
        self.units_per_s = units_per_s
        self.concurrent = concurrent
        self._seen: dict[str, int] = {}
        """Per key's window (``memq:budget:<key>:<second>``), the most this server saw
        spent in it: every spend reads the total of every server, so the guard's early
        refusal needs no read of its own on every call."""

    @contextmanager
    def spend(self, grant: Grant | None, units: int) -> Iterator[None]:
        """Hold a running place and ``units`` of the second's budget for one call."""
        if grant is None:
            yield
            return
        limit, running_key, window = self._limit(grant), _running(grant), _window(grant)
        with broker.translated(self.redis_url, "counting a key's budget"):
            pipe = self.redis.pipeline(transaction=True)
            pipe.incrby(window, units)
            pipe.expire(window, 2)
            pipe.incr(running_key)
            pipe.expire(running_key, RUNNING_TTL_S)
            spent, _, running, _ = pipe.execute()
        self._saw(window, spent)
        try:
            if spent > limit:
                raise RateLimited(f"this key spent its {limit} units of this second "
                                  f"(a write costs one per event); retry in a second")
            if running > (grant.concurrent or self.concurrent):
                raise RateLimited(f"this key already has {running - 1} calls running, its "
                                  "most at once; retry in a moment")
            yield
        finally:
            with broker.translated(self.redis_url, "giving back a key's place"):
                self.redis.decr(running_key)


    def spent(self, grant: Grant | None) -> bool:
        """Whether ``grant``'s key has spent this second's budget, as far as this server
        saw (by every server, in its own last call of the second); no Redis read. A key
        spent on other servers alone is refused at its call instead, once its body is in."""
        if grant is None:
            return False
        return self._seen.get(_window(grant), 0) >= self._limit(grant)

    def _saw(self, window: str, spent: int) -> None:
        if len(self._seen) > MAX_WINDOWS_SEEN:  # last seconds' windows: of no use now
            self._seen.clear()
        self._seen[window] = max(spent, self._seen.get(window, 0))

    def _limit(self, grant: Grant) -> int:
        return grant.units_per_s or self.units_per_s


def _window(grant: Grant) -> str:
    """This second's budget of ``grant``'s key (its delegated tokens spend the same)."""
    return f"memq:budget:{grant.key_id}:{int(time.time())}"


def _running(grant: Grant) -> str:
    return f"memq:running:{grant.key_id}"


def cost(name: str, given: dict[str, Any], writes: bool) -> int:
    """What a call costs: 1, or for a write the events it sends."""
    turns = given.get("turns") if name == "append_many" else None
    return max(1, len(turns)) if writes and isinstance(turns, list) else 1
