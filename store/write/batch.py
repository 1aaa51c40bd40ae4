"""Applying one batch of inbox entries inside the writer's open transaction.

The fast path appends all new events with one ``executemany`` and projects them in runs
of the same type (so order is kept). If an applier refuses an event half-way, the caller
rolls the transaction back and applies the batch again on the careful path, one
savepoint per event, so that only the bad event is set aside.

Every entry is judged with the rights of the stream it came from (:mod:`memq.authority`):
an event its sender may not send is set aside like any bad one, with the reason. Changing
or deleting a task is judged against the task as it stands at that point of the batch,
which only the careful path knows, so a batch with such an event from a role other than
admin takes the careful path.

Events sent for an API key are judged against the key's grant (store/write/attribution.py).
The fast path judges them all before applying any, which gives the answers one by one
would only when nothing in the batch can change what they are judged by: a batch of
messages whose keyed ones all name sessions that already have their owner. Any other
batch with a keyed event takes the careful path.

The fast path records the entries it sets aside after applying the events; a forget
deletes the rejected entries that name what it forgets (store/projections/forgetting.py),
and must see those that came before it. So a batch with a forget after a set-aside entry
takes the careful path too, which records them in order.
"""

from __future__ import annotations

import logging
from collections import Counter
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import NamedTuple

import apsw
import orjson

from memq import authority, names
from memq.authority import ROLE_OF_STREAM, Role
from memq.clock import future_problem
from memq.config import LimitsConfig
from memq.errors import InvalidEvent
from memq.events import Event, EventType, decode
from memq.inbox import MAX_ID_PART, in_range, plausible, stream_position
from memq.logs import log
from memq.rejections import ON_BEHALF, SENDER, Rejection, claimed
from memq.store.effects import Effects
from memq.store.projections import apply_events, forgetting, record_event, sessions
from memq.store.read.tasks import task as committed_task
from memq.store.write import attribution, rejected
from memq.store.write.log import append_events, check_redelivered

logger = logging.getLogger("memq.writer")



class Entry(NamedTuple):
    """One inbox stream entry as Redis delivered it (``fields`` is None once deleted)."""

    stream: str
    id: bytes
    fields: dict[bytes, bytes] | None


KEPT_RAW_FACTOR = 2
"""An entry over this many times ``[limits] max_payload_bytes`` is set aside cut to that."""

MAX_ROW_ID = 2**63 - 1
"""SQLite's largest rowid: a bigger one cannot be bound as a parameter."""

APPLY_ERRORS = (InvalidEvent, apsw.ConstraintError, apsw.MismatchError)
"""An applier's refusal of one event: that event is set aside, the batch goes on."""


class RetryCarefully(Exception):
    """The fast path met an event an applier refused; redo the batch with savepoints."""


@dataclass(frozen=True)
class Decoded:
    stream: str
    stream_id: str
    raw: bytes
    replay_of: int | None
    event: Event | None
    error: str | None
    sender: str | None = None
    """The client that sent it (to report a rejection to), when the entry says."""
    key_id: str | None = None
    """The API key ``memq serve`` sent it for: judged against its grant, and recorded."""
    narrowed: str | None = None
    """A delegated token's narrowing of that key's grant (:mod:`memq.narrowing`)."""

    @property
    def role(self) -> Role:
        return ROLE_OF_STREAM[self.stream]

    @property
    def names_a_task(self) -> bool:
        """Judged against the task it names (see :func:`authority.target_refusal`)."""
        return (self.event is not None and self.role is not Role.ADMIN
                and self.event.type in authority.TARGETS_A_TASK)


@dataclass
class BatchResult:
    applied: int = 0
    duplicates: int = 0
    rejected: int = 0
    last_id: str = ""
    effects: Effects = field(default_factory=Effects)
    types: Counter[str] = field(default_factory=Counter)
    """Applied events by type, for the metrics."""
    reports: list[tuple[str, Rejection]] = field(default_factory=list)
    """(sender, rejection) of each rejected entry whose sender is known, to report back."""

    @property
    def size(self) -> int:
        return self.applied + self.duplicates + self.rejected


def decode_entries(entries: Iterable[Entry], limits: LimitsConfig) -> list[Decoded]:
    """Parse, validate and authorise every entry; writes nothing, so it runs before the
    transaction.

    Never raises: whatever an entry holds, it comes back as an event or as a reason.
    """
    return [_decode(entry.stream, entry.id.decode(), entry.fields or {}, limits)
            for entry in entries]


def _decode(
    stream: str, stream_id: str, fields: dict[bytes, bytes], limits: LimitsConfig
) -> Decoded:
    raw = fields.get(names.EVENT_FIELD, b"")
    replay_of, replay_problem = _replay_of(fields)
    sender, key_id, narrowed, sender_problem = _sender(fields)
    sender_problem = sender_problem or _key_problem(stream, key_id)
    kept = KEPT_RAW_FACTOR * limits.max_payload_bytes
    if len(raw) > kept:
        # Set aside for good (no replay can apply it), and not kept whole: a stream entry
        # may be hundreds of megabytes, and the rejected table would keep them all.
        return Decoded(stream, stream_id, raw[:kept], replay_of, None,
                       f"event is {len(raw)} bytes, over the {limits.max_payload_bytes} limit "
                       f"(only its first {kept} bytes are kept)", sender)
    try:
        problem = (_id_problem(stream_id) or replay_problem or sender_problem
                   or _stream_problem(fields))
        if problem is not None:
            return Decoded(stream, stream_id, raw, replay_of, None, problem, sender)
        event = decode(raw, limits)
        problem = _future_problem(event) or authority.refusal(ROLE_OF_STREAM[stream], event)
        if problem is not None:
            return Decoded(stream, stream_id, raw, replay_of, None, problem, sender)
        return Decoded(stream, stream_id, raw, replay_of, event, None, sender, key_id,
                       narrowed)
    except InvalidEvent as exc:
        problem = _never_allowed(stream, raw) or str(exc)
        return Decoded(stream, stream_id, raw, replay_of, None, problem, sender)
    except Exception as exc:  # a validation bug must not stop the writer: set it aside
        logger.error("decoding entry %s failed", stream_id, exc_info=exc)
        return Decoded(stream, stream_id, raw, replay_of, None,
                       f"cannot be decoded ({type(exc).__name__}: {exc})", sender)


def _never_allowed(stream: str, raw: bytes) -> str | None:
    """For an entry that did not decode: the authority's reason, if its stream's role may
    send no event of the type it names (only read on this path: the good ones pay nothing)."""
    try:
        envelope = orjson.loads(raw)
    except orjson.JSONDecodeError:
        return None
    etype = envelope.get("type") if isinstance(envelope, dict) else None
    return authority.type_refusal(ROLE_OF_STREAM[stream], etype)


def _sender(fields: dict[bytes, bytes]
            ) -> tuple[str | None, str | None, str | None, str | None]:
    """The client an entry names as its sender, the key it acts for and a delegated
    token's narrowing of it (None if none), or the problem with them."""
    value = fields.get(names.SENDER_FIELD)
    if value is None:
        return None, None, None, None
    text = value.decode("ascii", errors="replace")
    if SENDER.fullmatch(text):
        return text, None, None, None
    acting = ON_BEHALF.fullmatch(text)
    if acting is not None:
        return acting.group(1), acting.group(2), acting.group(3), None
    return None, None, None, ("sender must be 32 lowercase hex digits (and ':' and a "
                              f"key's 16), got {value!r:.60}")


def _key_problem(stream: str, key_id: str | None) -> str | None:
    """A key is named on the keys' stream, which only memq serve may push, and nowhere
    else: a key named by anyone else would put their events in its audit."""
    if stream == names.KEYS_INBOX_STREAM and key_id is None:
        return f"an entry of {stream} must name the API key it was sent for"
    if stream != names.KEYS_INBOX_STREAM and key_id is not None:
        return f"only {names.KEYS_INBOX_STREAM} names API keys, not {stream}"
    return None


def _id_problem(stream_id: str) -> str | None:
    """An entry whose id Redis could not have made: only a sender that chose the id can
    have put it there (the admin's stream, or a stream from before the relay), or Redis
    made it after such an id. Set aside, so the stream's ids can be brought back."""
    position = stream_position(stream_id)
    if plausible(position):
        return None
    if not in_range(position):
        return (f"stream entry id {stream_id:.45} is beyond {MAX_ID_PART} in a part "
                "(an id chosen by its sender); replay it to send it again")
    return (f"stream entry id {stream_id:.45} is more than a day ahead of the writer's "
            "clock (an id chosen by its sender); replay it to send it again")


def _future_problem(event: Event) -> str | None:
    """A time from the future would keep its turn the session's newest, out of
    retention's reach, forever: the producer's clock is trusted up to a tolerance."""
    problem = future_problem(event.created_at)
    stamped = event.payload.get("created_at")
    if problem is None and isinstance(stamped, str):
        problem = future_problem(stamped, "payload.created_at")
    return problem


def _stream_problem(fields: dict[bytes, bytes]) -> str | None:
    if not fields.get(names.EVENT_FIELD):
        return f"entry has no {names.EVENT_FIELD.decode()!r} field"
    unknown = sorted(set(fields) - names.INBOX_FIELDS)
    if unknown:
        shown = ", ".join(repr(name)[2:-1] for name in unknown)
        return f"unknown stream field(s): {shown}"
    return None


def _replay_of(fields: dict[bytes, bytes]) -> tuple[int | None, str | None]:
    """The rejected row an entry replays (None if none), or the problem with the field."""
    value = fields.get(names.REPLAY_FIELD)
    if value is None:
        return None, None
    # Decimal digits only (int() would also take "+1", " 1", "1_0" and other scripts'
    # digits); and small enough for SQLite, or binding it would fail on every restart.
    if value.isdigit() and len(value) <= 19 and 0 < int(value) <= MAX_ROW_ID:
        return int(value), None
    return None, f"replay_of must be a rejected event's id (1-{MAX_ROW_ID}), got {value!r:.40}"


def apply_fast(cur: apsw.Cursor, batch: list[Decoded], now: str, result: BatchResult) -> None:
    if any(item.names_a_task for item in batch):
        raise RetryCarefully("an event is judged against the task it names")
    if _forgets_a_rejection(batch):
        raise RetryCarefully("a forget must see the entries set aside before it")
    refused = _keyed_refusals(cur, batch)
    kept = [(d.event, d.key_id) for n, d in enumerate(batch)
            if d.event is not None and n not in refused]
    events = [event for event, _ in kept]
    try:
        fresh = append_events(cur, events, now)
        apply_events(cur, fresh, result.effects)
    except Exception as exc:
        if _is_store_failure(exc):
            raise
        raise RetryCarefully(str(exc)) from exc
    result.applied += len(fresh)
    result.duplicates += len(events) - len(fresh)
    result.types.update(event.type for _, event in fresh)
    sent_for: dict[str, str | None] = {}  # an event twice in a batch is applied as the first
    for event, key_id in kept:
        sent_for.setdefault(event.id, key_id)
    attribution.record_many(cur, ((seq, key) for seq, e in fresh
                                  if (key := sent_for[e.id]) is not None))
    for n, item in enumerate(batch):
        if item.error is not None:
            _reject(cur, item, item.error, now, result)
        elif n in refused:
            _reject(cur, item, refused[n], now, result)
        elif item.replay_of is not None:
            rejected.mark_replayed(cur, item.replay_of, item.stream, now)


JUDGED_UP_FRONT = frozenset({EventType.MESSAGE_APPENDED, EventType.MESSAGE_EMBEDDED})
"""Types no event can change the judgement of a key's message by, within a batch of
them, as long as each session its keyed messages name already has its owner."""


def _keyed_refusals(cur: apsw.Cursor, batch: list[Decoded]) -> dict[int, str]:
    """Why each event sent for a key is refused (by its place in the batch), all judged
    before any is applied: the same answers as one by one (:func:`apply_careful`) when
    nothing in the batch can change what they are judged by; else :class:`RetryCarefully`."""
    keyed = [(n, item.event, item.key_id, item.narrowed) for n, item in enumerate(batch)
             if item.key_id is not None and item.event is not None]
    if not keyed:
        return {}
    if any(item.event is not None and item.event.type not in JUDGED_UP_FRONT
           for item in batch):
        raise RetryCarefully("an event sent for a key is judged as the batch goes")
    named = {event.session_id for _, event, _, _ in keyed}
    owned = sessions.owned(cur, {s for s in named if s is not None})
    if not named <= owned.keys():  # a message without a session is never among them
        raise RetryCarefully("an event sent for a key names a session without its owner")
    # The owners just read are the ones judging reads: not read again per session.
    refused = {}
    reads = attribution.Reads(owners=dict(owned))
    for n, event, key_id, narrowed in keyed:
        reason = attribution.refusal(cur, event, key_id, narrowed, reads=reads)
        if reason is not None:
            refused[n] = reason
    return refused


def _forgets_a_rejection(batch: list[Decoded]) -> bool:
    """Whether a forget follows an entry set aside in this batch."""
    rejected_before = False
    for item in batch:
        if item.event is None:
            rejected_before = True
        elif rejected_before and item.event.type in forgetting.APPLIERS:
            return True
    return False


def apply_careful(cur: apsw.Cursor, batch: list[Decoded], now: str, result: BatchResult) -> None:
    for item in batch:
        if item.event is None:
            _reject(cur, item, item.error or "invalid entry", now, result)
            continue
        refusal = _target_refusal(cur, item) if item.names_a_task else None
        if refusal is None and item.key_id is not None:
            refusal = attribution.refusal(cur, item.event, item.key_id, item.narrowed)
        if refusal is not None:
            _reject(cur, item, refusal, now, result)
            continue
        try:
            applied = _apply_in_savepoint(cur, item.event, now, result.effects)
        except InvalidEvent as exc:
            _reject(cur, item, str(exc), now, result)
            continue
        if item.replay_of is not None:
            rejected.mark_replayed(cur, item.replay_of, item.stream, now)
        if applied and item.key_id is not None:
            attribution.record(cur, item.event.id, item.key_id)
        result.applied += applied
        result.duplicates += not applied
        if applied:
            result.types[item.event.type] += 1


def _target_refusal(cur: apsw.Cursor, item: Decoded) -> str | None:
    """The task the event names, as it stands now in this transaction, decides."""
    assert item.event is not None
    found = committed_task(cur.getconnection(), item.event.payload["task_id"])
    if found is None:
        return None  # the applier says "unknown task", or a delete is a no-op
    return authority.target_refusal(item.role, item.event.type, trusted=found.is_trusted,
                                    source=found.source)


def _apply_in_savepoint(cur: apsw.Cursor, event: Event, now: str, effects: Effects) -> bool:
    """Insert and project one event inside a savepoint; False if it was a duplicate."""
    cur.execute("SAVEPOINT event")
    mark = effects.mark()
    try:
        applied = record_event(cur, event, now, effects)
        if not applied:
            check_redelivered(cur, event)
    except Exception as exc:
        if _is_store_failure(exc):
            raise
        cur.execute("ROLLBACK TO event")
        cur.execute("RELEASE event")
        effects.undo_since(mark)
        raise InvalidEvent(_refusal(exc, event)) from exc
    cur.execute("RELEASE event")
    return applied


def _is_store_failure(exc: Exception) -> bool:
    """A failure of the database itself (disk full, I/O): the batch is retried, not judged."""
    return isinstance(exc, apsw.Error) and not isinstance(exc, APPLY_ERRORS)


def _refusal(exc: Exception, event: Event) -> str:
    if isinstance(exc, APPLY_ERRORS):
        return str(exc)
    # An applier bug must not stop the writer on every restart (the entry would come back
    # each time): set the event aside, loudly, so it can be replayed once fixed.
    logger.error("applier failed on event %s (%s)", event.id, event.type, exc_info=exc)
    return f"{event.type}: cannot be applied ({type(exc).__name__}: {exc})"


def _reject(cur: apsw.Cursor, item: Decoded, reason: str, now: str, result: BatchResult) -> None:
    reason = rejected.bounded_reason(reason)
    rejected.record(cur, item.stream, item.stream_id, item.raw, reason, now, item.replay_of)
    result.rejected += 1
    if item.sender is not None:
        event_id, event_type = ((item.event.id, item.event.type) if item.event is not None
                                else claimed(item.raw))
        result.reports.append((item.sender, Rejection(
            event_id=event_id, event_type=event_type, reason=reason, entry_id=item.stream_id)))
    log(logger, "event rejected", logging.WARNING, stream_id=item.stream_id, reason=reason)
