"""Rejections reported back to the client that sent the rejected event.

Each client stamps its inbox entries with a sender id (:func:`new_sender`, in the entry's
``sender`` field). When the writer sets an entry aside, it also appends a
:class:`Rejection` to ``memq:rejections:<sender>``, in the same Redis transaction that
moves the commit position past the entry. So once ``flush`` sees its last entry
committed, every rejection of what it sent is already there to read, and it raises them
as :class:`~memq.errors.EventsRejected`. The stream is capped at :data:`MAX_REPORTED`
entries and expires :data:`REPORT_TTL_S` after its last one; the rejected entries
themselves stay in ``rejected_events`` for an operator (``memq rejected list``).

An entry without a sender (a worker's, a replay) is reported nowhere else; one with a
sender that is not :data:`SENDER` is set aside like any malformed entry.
"""

from __future__ import annotations

import re
import uuid
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Protocol

import orjson

from memq import names

SENDER = re.compile(r"[0-9a-f]{32}")
ON_BEHALF = re.compile(r"([0-9a-f]{32}):([0-9a-f]{16})(?::([A-Za-z0-9_-]{1,20000}))?")
"""A sender acting for an API key (``memq serve``): the sender id, the key's id, and for a
delegated token what it narrows the key to (:mod:`memq.narrowing`)."""


def sent_as(sender: str, key_id: str | None) -> str:
    """The sender field of an entry: the sender id, and the key it acts for if any."""
    return sender if key_id is None else f"{sender}:{key_id}"
"""A sender id: 32 lowercase hex digits (a random UUID's)."""

MAX_REPORTED = 1000
"""Rejections kept per sender (approximately: the stream is trimmed with ``~``)."""

REPORT_TTL_S = 7 * 24 * 3600
"""A sender's rejections expire this long after the last one was reported."""

SHOWN_IN_MESSAGE = 5
"""Rejections named in the error message; the error carries all of them."""

MAX_ID_CHARS = 100
"""An event id longer than this, read from an entry that could not be decoded, is not
repeated back (it is the sender's input, not an id memq made)."""


def new_sender() -> str:
    return uuid.uuid4().hex


@dataclass(frozen=True)
class Rejection:
    """One event the writer set aside, and why."""

    event_id: str | None
    """None when the entry was too malformed to carry one."""
    event_type: str | None
    reason: str
    entry_id: str
    """The inbox entry it came in."""

    def to_fields(self) -> dict[str, str]:
        fields = {"entry_id": self.entry_id, "reason": self.reason}
        if self.event_id is not None:
            fields["event_id"] = self.event_id
        if self.event_type is not None:
            fields["type"] = self.event_type
        return fields

    @classmethod
    def from_fields(cls, fields: Mapping[bytes, bytes]) -> Rejection:
        def text(name: bytes) -> str | None:
            value = fields.get(name)
            return None if value is None else value.decode(errors="replace")

        return cls(event_id=text(b"event_id"), event_type=text(b"type"),
                   reason=text(b"reason") or "", entry_id=text(b"entry_id") or "")


def claimed(raw: bytes) -> tuple[str | None, str | None]:
    """The event id and type an entry that could not be decoded claims, where it plainly
    has them (short printable strings), for its sender to recognise it."""
    try:
        value = orjson.loads(raw)
    except orjson.JSONDecodeError:
        return None, None
    if not isinstance(value, dict):
        return None, None
    return _plain(value.get("id")), _plain(value.get("type"))


def _plain(value: object) -> str | None:
    if isinstance(value, str) and 0 < len(value) <= MAX_ID_CHARS and value.isprintable():
        return value
    return None


def describe(rejections: Sequence[Rejection]) -> str:
    """The message of :class:`~memq.errors.EventsRejected` for these rejections."""
    shown = "; ".join(
        f"{r.event_id or 'an entry'} ({r.event_type or 'undecodable'}): {r.reason}"
        for r in rejections[:SHOWN_IN_MESSAGE])
    more = len(rejections) - SHOWN_IN_MESSAGE
    tail = f"; and {more} more" if more > 0 else ""
    return (f"the writer rejected {len(rejections)} event(s) this client sent: {shown}{tail}"
            " (see `memq rejected list`)")


class SetAside(Protocol):
    """A rejected entry as the database keeps it (``store/read/rejected.py``)."""

    @property
    def id(self) -> int: ...
    @property
    def stream(self) -> str: ...
    @property
    def raw(self) -> bytes: ...


def replay(client: Any, rows: Iterable[SetAside]) -> int:
    """Send set-aside entries through the inbox stream each came from again, naming the
    row it replays (the writer marks it replayed, or updates its reason); returns how
    many. Back to its own stream, an entry is judged with its sender's rights, never with
    those of the person who replays it. ``client``: Redis, with the person's credentials
    (the caller translates its errors)."""
    pipe = client.pipeline(transaction=False)
    count = 0
    for row in rows:
        pipe.xadd(row.stream, {names.EVENT_FIELD: row.raw, names.REPLAY_FIELD: str(row.id)})
        count += 1
    pipe.execute()
    return count
