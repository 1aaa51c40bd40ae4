"""The relay: agents' and workers' queued items into the writer's inbox streams.

Agents and workers do not write the streams the writer reads: a sender that may XADD
chooses the entry's id, and one id can stop every sender (an id at the top of the id
space exhausts the stream; one past 2^63 cannot be recorded). They RPUSH to their role's
queue (:data:`memq.names.INBOX_QUEUES`), where an item has no id, and this relay, run by the
writer, moves the items into the role's stream with ids Redis makes (``*``).

One Lua script moves a run of items: each item becomes an entry (its sender and event
split apart, its ordinal added), then the moved items leave the list and the relayed count
grows by as many, all in one atomic step, so an item is in the list or in the stream,
never both nor neither. An XADD Redis refuses ends the run there: the items from it on
stay queued, and the relay says why and tries again later.

A thread per queue waits on its list with a rotating BLMOVE (the first item put back
where it was: nothing moves, but the call blocks until the list has items), so a push is
relayed at once, not at the writer's next poll.

**The keys' queue is relayed in turn** (:data:`IN_TURN`): every API key's events share it,
and in arrival order one key's flood would sit in the stream ahead of every other key's
next turn. So only a few of its entries are in the stream at a time (:data:`IN_FLIGHT`,
delivered to the writer or not), and each move takes the waiting items key by key, round
robin, each key's in its own order. A key's next turn waits behind at most that many of
another's, not behind its whole backlog; and a key with only a turn or two waiting (a
light one, :data:`LIGHT`) is moved with just one of each busier key's, and committed
before the relay moves more, so its own transaction is small too. Since the entries no
longer keep the queue's order, each carries its key's own count (``kseq``, from
``memq:queue:keys:key:<id>:relayed``), which is what a keyed sender's ``flush`` waits on;
the queue's ordinals follow the stream's order, so its committed ordinal still says how
much of the queue is done.
"""

from __future__ import annotations

import logging
import threading
from typing import Any

import redis

from memq import names
from memq.broker import TRANSIENT
from memq.inbox import FUTURE_TOLERANCE_MS
from memq.logs import log

logger = logging.getLogger("memq.writer")

RUN = 1000
"""Items moved by one call of the script."""

MAX_RETRY_DELAY_S = 1.0
"""The longest wait between two tries after a failure: short, since the usual one (a
stream waiting to be brought back) clears as soon as the writer's next batch commits."""

_REFUSE_CHOSEN_IDS = """
local info = redis.pcall('XINFO', 'STREAM', KEYS[3])
if type(info) == 'table' and not info.err then
  for i = 1, #info, 2 do
    if info[i] == 'last-generated-id' then
      local ms, seq = string.match(info[i + 1], '^(%d+)-(%d+)$')
      local now = redis.call('TIME')
      local limit = tonumber(now[1]) * 1000 + tonumber(ARGV[2])
      if tonumber(ms) > limit or tonumber(seq) >= 9.2e18 then
        return {0, 'the stream holds an id chosen by its sender (' .. info[i + 1] ..
                   '): items wait until the writer has set it aside'}
      end
    end
  end
end
"""
"""Both scripts start here: nothing moves into a stream whose last id a sender chose (KEYS[3]
the stream, ARGV[2] how far ahead of Redis' clock an id may be; see the SCRIPT below)."""

SCRIPT = _REFUSE_CHOSEN_IDS + """
local items = redis.call('LRANGE', KEYS[1], 0, tonumber(ARGV[1]) - 1)
local base = tonumber(redis.call('GET', KEYS[2]) or '0')
local moved, failure = 0, ''
for i, item in ipairs(items) do
  local ordinal = string.format('%d', base + i)
  local nl = string.find(item, '\\n', 1, true)
  local reply
  if nl == nil then
    reply = redis.pcall('XADD', KEYS[3], '*', 'event', item, 'ordinal', ordinal)
  elseif nl == 1 then
    reply = redis.pcall('XADD', KEYS[3], '*', 'event', string.sub(item, 2),
                        'ordinal', ordinal)
  else
    reply = redis.pcall('XADD', KEYS[3], '*', 'event', string.sub(item, nl + 1),
                        'sender', string.sub(item, 1, nl - 1), 'ordinal', ordinal)
  end
  if type(reply) == 'table' and reply.err then
    failure = reply.err
    break
  end
  moved = i
end
if moved > 0 then
  redis.call('LTRIM', KEYS[1], moved, -1)
  redis.call('SET', KEYS[2], string.format('%d', base + moved))
end
return {moved, failure}
"""
"""KEYS: the queue, its relayed count, the stream; ARGV: how many items at most, how far
ahead of Redis' clock a stream id may be (ms). Nothing moves into a stream whose last id
a sender chose (see :func:`memq.inbox.plausible`): the ids Redis would stamp after it
are as bad, and the writer would set the items aside with them. They wait, and move once
the writer has set that entry aside and brought the stream back (``Inbox.repair_ids``)."""


IN_FLIGHT = 32
"""Keys' entries in the stream at most, delivered to the writer or not: what another key's
turn may wait behind. (A transaction of 32 turns, a third of them 8 KB tool outputs, takes
a few milliseconds; bench/fairness.py measures the rest, and what fewer would cost.)"""

FULL_WAIT_S = 0.05
"""How long the keys' relay waits at most for the writer's next commit before looking
again at a stream holding its share."""

SCAN = 512
"""Waiting items of the keys' queue looked at in one move: the keys they belong to share
the move. (The moved ones leave the list by a marker, ``''``, which no item can be: each
holds a newline.)"""

LIGHT = 4
"""A key with at most this many items waiting is light: an agent's next turn, not a
backlog. A move that finds light keys beside heavy ones takes the light keys' items and
only one of each heavy key's, and the relay moves nothing more until the writer has
committed them: the light key's turn is committed in a transaction of a few events, not
behind a full share of the heavy keys' (the sparse-flow rule of fair queueing). A heavy
key still moves on every move, so no number of light keys can starve it."""

IN_TURN = _REFUSE_CHOSEN_IDS + """
local room = tonumber(ARGV[1])
local groups = redis.pcall('XINFO', 'GROUPS', KEYS[3])
if type(groups) == 'table' and not groups.err then
  for _, group in ipairs(groups) do
    local fields = {}
    for i = 1, #group, 2 do fields[group[i]] = group[i + 1] end
    if fields['name'] == ARGV[3] then
      room = room - (tonumber(fields['lag']) or 0) - (tonumber(fields['pending']) or 0)
    end
  end
end
if room <= 0 then return {0, '', 1} end
local items = redis.call('LRANGE', KEYS[1], 0, tonumber(ARGV[4]) - 1)
if #items == 0 then return {0, '', 0} end
local parsed, lanes, order = {}, {}, {}
for i, item in ipairs(items) do
  local nl = string.find(item, '\\n', 1, true)
  local sender = ''
  if nl ~= nil then sender = string.sub(item, 1, nl - 1) end
  local marked = string.sub(sender, 1, 1) == ARGV[6]
  if marked then sender = string.sub(sender, 2) end
  local lane = string.match(sender, '^[^:]*:([^:]*)') or sender
  parsed[i] = {sender, nl or 0, marked, lane}  -- 0, not nil: unpack stops at a hole
  if lanes[lane] == nil then lanes[lane] = {}; table.insert(order, lane) end
  table.insert(lanes[lane], i)
end
local light_most, light, heavy = tonumber(ARGV[7]), false, false
for _, lane in ipairs(order) do
  if #lanes[lane] <= light_most then light = true else heavy = true end
end
local sparse = light and heavy
local picks, round = {}, 1
while #picks < room do
  local any = false
  for _, lane in ipairs(order) do
    local index = lanes[lane][round]
    local takes = round == 1 or not sparse or #lanes[lane] <= light_most
    if index ~= nil and takes and #picks < room then table.insert(picks, index); any = true end
  end
  if not any then break end
  round = round + 1
end
local base = tonumber(redis.call('GET', KEYS[2]) or '0')
local moved, failure = {}, ''
for n, index in ipairs(picks) do
  local sender, nl, marked, lane = unpack(parsed[index])
  local event = items[index]
  if nl > 0 then event = string.sub(event, nl + 1) end
  local ordinal = string.format('%d', base + n)
  local reply
  if sender == '' then
    reply = redis.pcall('XADD', KEYS[3], '*', 'event', event, 'ordinal', ordinal)
  elseif not marked then  -- queued by an older server: not counted for its key
    reply = redis.pcall('XADD', KEYS[3], '*', 'event', event, 'sender', sender,
                        'ordinal', ordinal)
  else
    local counted = ARGV[5] .. lane .. ':relayed'
    local own = redis.call('INCR', counted)
    reply = redis.pcall('XADD', KEYS[3], '*', 'event', event, 'sender', sender,
                        'ordinal', ordinal, 'kseq', string.format('%d', own))
    if type(reply) == 'table' and reply.err then redis.call('DECR', counted) end
  end
  if type(reply) == 'table' and reply.err then
    failure = reply.err
    break
  end
  moved[index] = true
end
local count = 0
for index in pairs(moved) do
  redis.call('LSET', KEYS[1], index - 1, '')
  count = count + 1
end
if count > 0 then
  redis.call('LREM', KEYS[1], count, '')
  redis.call('SET', KEYS[2], string.format('%d', base + count))
end
return {count, failure, sparse and 2 or 0}
"""
"""KEYS: the keys' queue, its relayed count, its stream; ARGV: how many entries may be in
the stream (:data:`IN_FLIGHT`), how far ahead of Redis' clock a stream id may be, the
writer's group, how many waiting items to look at, the prefix of the keys' counts, the
mark of an item its push counted (one an older server queued is moved uncounted), how
many waiting items a key may have and still be light (:data:`LIGHT`).
Returns how many moved, Redis' refusal if an XADD failed (the items from it on stay,
in their order), and 1 when the stream was full (nothing moved: try again shortly), 2
after a light key's move (let the writer commit it before moving more)."""


def relay(connection: redis.Redis, stream: str, run: int = RUN) -> int:
    """Move up to ``run`` queued items of ``stream``'s queue into it; how many moved.
    Raises :class:`redis.exceptions.ResponseError` with Redis' reason if an XADD was
    refused (the items from it on stay queued)."""
    return _relay(connection, stream, run)[0]


def _relay(connection: redis.Redis, stream: str, run: int = RUN) -> tuple[int, bool]:
    """How many moved, and whether to wait for the writer's next commit before the next
    move: the keys' stream was full, or a light key's turn was just moved."""
    keys = [names.INBOX_QUEUES[stream], names.RELAYED_KEYS[stream], stream]
    if stream == names.KEYS_INBOX_STREAM:
        reply: Any = connection.eval(  # type: ignore[no-untyped-call, unused-ignore]
            IN_TURN, len(keys), *keys, min(run, IN_FLIGHT), FUTURE_TOLERANCE_MS,
            names.WRITER_GROUP, SCAN, names.KEY_COUNT_PREFIX, names.COUNTED_MARK, LIGHT)
    else:
        reply = connection.eval(  # type: ignore[no-untyped-call, unused-ignore]
            SCRIPT, len(keys), *keys, run, FUTURE_TOLERANCE_MS)
    moved, failure = int(reply[0]), reply[1]
    if failure:
        text = failure.decode(errors="replace") if isinstance(failure, bytes) else failure
        raise redis.exceptions.ResponseError(
            f"relaying {names.INBOX_QUEUES[stream]} into {stream} stopped after {moved} items: "
            f"{text}")
    return moved, len(reply) > 2 and int(reply[2]) in (1, 2)


def relay_all(connection: redis.Redis) -> int:
    """Move everything queued, queue by queue; how many items moved (for tests and tools)."""
    total = 0
    for stream in names.INBOX_QUEUES:
        while (moved := relay(connection, stream)) > 0:
            total += moved
    return total


class Relay(threading.Thread):
    """Moves one queue's items into its stream as they come, until ``stop`` is set."""

    def __init__(self, connection: redis.Redis, stream: str, stop: threading.Event,
                 wait_s: float, committed: threading.Event | None = None) -> None:
        super().__init__(name=f"memq-relay-{stream}", daemon=True)
        self.redis = connection
        self.committed = committed or threading.Event()
        """Set by the writer after each batch it acknowledges: the keys' stream has room
        again (waited on, up to :data:`FULL_WAIT_S`, while it holds its share)."""
        self.wait_s = wait_s
        """How long one BLMOVE waits before the thread checks whether to stop: the
        writer's ``block_ms``, so both its threads stop as soon."""
        self.stream = stream
        self.queue = names.INBOX_QUEUES[stream]
        self.stop = stop

    def run(self) -> None:
        delay = 0.1
        while not self.stop.is_set():
            try:
                self._relay_then_wait()
                delay = 0.1
            except (*TRANSIENT, redis.exceptions.ResponseError) as exc:
                log(logger, "relaying queued items failed; retrying", logging.WARNING,
                    queue=self.queue, error=str(exc), retry_in_s=delay)
                self.stop.wait(delay)
                delay = min(MAX_RETRY_DELAY_S, delay * 2)

    def _relay_then_wait(self) -> None:
        while not self.stop.is_set():
            # Cleared before the move: only a commit after it may end the wait below.
            self.committed.clear()
            moved, wait = _relay(self.redis, self.stream)
            if wait:  # the stream holds its share, or a light key's turn: the next commit
                self.committed.wait(FULL_WAIT_S)
                return
            if moved < RUN:
                break
        # Redis takes a fractional timeout; redis-py's annotation says int.
        self.redis.blmove(self.queue, self.queue, self.wait_s,  # type: ignore[arg-type]
                          "LEFT", "LEFT")
