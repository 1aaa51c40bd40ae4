"""Applying one batch of inbox entries inside the writer's open transaction.

The fast path appends all new events with one ``executemany`` and projects them in runs
of the same type (so order is kept). If an applier refuses an event half-way, the caller
rolls the transaction back and applies the batch again on the careful path, one
savepoint per event, so that only the bad event is set aside.
"""

from __future__ import annotations

import logging
from collections import Counter
from collections.abc import Iterable
from dataclasses import dataclass, field

import apsw

from memq import names
from memq.config import LimitsConfig
from memq.errors import InvalidEvent
from memq.events import Event, decode
from memq.logs import log
from store import rejected
from store.effects import Effects
from store.log import append_events
from store.projections import apply_events, record_event

logger = logging.getLogger("memq.writer")

Entry = tuple[bytes, dict[bytes, bytes] | None]

APPLY_ERRORS = (InvalidEvent, apsw.ConstraintError, apsw.MismatchError)
"""An applier's refusal of one event: that event is set aside, the batch goes on."""


class RetryCarefully(Exception):
    """The fast path met an event an applier refused; redo the batch with savepoints."""


@dataclass(frozen=True)
class Decoded:
    stream_id: str
    raw: bytes
    replay_of: int | None
    event: Event | None
    error: str | None


@dataclass
class BatchResult:
    applied: int = 0
    duplicates: int = 0
    rejected: int = 0
    last_id: str = ""
    effects: Effects = field(default_factory=Effects)
    types: Counter[str] = field(default_factory=Counter)
    """Applied events by type, for the metrics."""

    @property
    def size(self) -> int:
        return self.applied + self.duplicates + self.rejected


def decode_entries(entries: Iterable[Entry], limits: LimitsConfig) -> list[Decoded]:
    """Parse and validate every entry; writes nothing, so it runs before the transaction."""
    return [_decode(stream_id.decode(), fields or {}, limits) for stream_id, fields in entries]


def _decode(stream_id: str, fields: dict[bytes, bytes], limits: LimitsConfig) -> Decoded:
    raw = fields.get(names.EVENT_FIELD, b"")
    replay_of = _replay_of(fields)
    if not raw:
        reason = f"entry has no {names.EVENT_FIELD.decode()!r} field"
        return Decoded(stream_id, raw, replay_of, None, reason)
    try:
        return Decoded(stream_id, raw, replay_of, decode(raw, limits), None)
    except InvalidEvent as exc:
        return Decoded(stream_id, raw, replay_of, None, str(exc))


def apply_fast(cur: apsw.Cursor, batch: list[Decoded], now: str, result: BatchResult) -> None:
    events = [d.event for d in batch if d.event is not None]
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
    for item in batch:
        if item.error is not None:
            _reject(cur, item, item.error, now, result)
        elif item.replay_of is not None:
            rejected.mark_replayed(cur, item.replay_of, now)


def apply_careful(cur: apsw.Cursor, batch: list[Decoded], now: str, result: BatchResult) -> None:
    for item in batch:
        if item.event is None:
            _reject(cur, item, item.error or "invalid entry", now, result)
            continue
        try:
            applied = _apply_in_savepoint(cur, item.event, now, result.effects)
        except InvalidEvent as exc:
            _reject(cur, item, str(exc), now, result)
            continue
        if item.replay_of is not None:
            rejected.mark_replayed(cur, item.replay_of, now)
        result.applied += applied
        result.duplicates += not applied
        if applied:
            result.types[item.event.type] += 1


def _apply_in_savepoint(cur: apsw.Cursor, event: Event, now: str, effects: Effects) -> bool:
    """Insert and project one event inside a savepoint; False if it was a duplicate."""
    cur.execute("SAVEPOINT event")
    mark = effects.mark()
    try:
        applied = record_event(cur, event, now, effects)
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
    rejected.record(cur, item.stream_id, item.raw, reason, now, item.replay_of)
    result.rejected += 1
    log(logger, "event rejected", logging.WARNING, stream_id=item.stream_id, reason=reason)


def _replay_of(fields: dict[bytes, bytes]) -> int | None:
    value = fields.get(names.REPLAY_FIELD)
    try:
        return int(value) if value is not None else None
    except ValueError:
        return None
