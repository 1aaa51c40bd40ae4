"""The change feed from the agent side: what was committed after a position, in order.

``changes_page`` reads one page (waiting up to ``wait`` seconds for a commit when there is
nothing new); ``changes`` (the surface's iterator) follows page after page. A follower
keeps the position of the last change it handled and starts again from it: it then sees
every later change once, in commit order. What a follower is shown is decided from its
credentials: the keys' own events only to the person, and, through ``memq serve``, only
its key's grant (``server/grants.py``).

A scheduled task's run reaches a follower as a ``task.fired`` change
(``changes(types=["task.fired"])``); its task is ``task(change.data["task_id"])``.
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass
from typing import Any

from memq.authority import Role
from memq.errors import FeedExpired, ValidationError
from memq.events import check_count, check_identifier
from memq.events.fields import INT64_LIMIT
from memq.printable import shown
from memq.producers.mixin import ClientBase
from memq.producers.ops import AskRole, Op, Read, Sleep
from memq.store.read import changes as stored
from memq.store.read.changes import MAX_PAGE, Change
from memq.store.read.pool import Reader

MAX_WAIT_S = 30.0
"""The longest one page waits for a commit (a server holds a thread that long)."""
POLL_S = 0.02
"""How often a waiting page looks for a new commit: about the writer's own batch pace."""
PERSON_ONLY = ("key.", "retention.", "consolidation.", "webhook.")
"""Event types only the person's credentials see in the feed: a key's secret digest, a
webhook's secret, and the writer's own passes over every tenant's sessions."""


@dataclass(frozen=True)
class ChangesPage:
    changes: list[Change]
    """What the caller may see of the page, in order."""
    position: int
    """Where the next page starts: the last change read, shown or not."""
    newest: int
    """The newest committed position (``after=newest`` follows from now on)."""


class ChangesOps(ClientBase):
    """The change feed's operation (``producers/ops.py``)."""

    def _changes_page_op(self, after: int | None, types: list[str] | None,
                         user_id: str | None, limit: int, wait: float) -> Op[ChangesPage]:
        start, patterns = _position(after), _types(types)
        if user_id is not None:
            check_identifier("user_id", user_id)
        check_count("limit", limit, 1, MAX_PAGE)
        deadline = time.monotonic() + bounded("wait", wait, 0, MAX_WAIT_S)
        role = yield AskRole("reading the change feed")
        while True:
            found, reached, newest, horizon = yield Read(_read_page, (start, limit))
            if start < horizon:
                raise FeedExpired(
                    f"position {start} is behind the feed: changes up to {horizon} were "
                    f"deleted with old forgets; read afresh, then follow from {horizon}",
                    horizon)
            if reached > start or time.monotonic() >= deadline:
                shown_ = [c for c in found if _shown(c, patterns, user_id, role)]
                return ChangesPage(shown_, reached, newest)
            yield Sleep(POLL_S)


def _read_page(conn: Reader, after: int, limit: int) -> tuple[list[Change], int, int, int]:
    with conn:  # one snapshot: the page, the newest position and the horizon agree
        found, reached = stored.page(conn, after, limit)
        newest, horizon = stored.newest(conn), stored.horizon(conn)
    return found, reached, newest, horizon


def _shown(change: Change, types: tuple[str, ...] | None, user_id: str | None,
           role: Role) -> bool:
    return (stored.matches(change, types)
            and (user_id is None or change.user_id == user_id)
            and (role is Role.ADMIN or not change.type.startswith(PERSON_ONLY)))


def _position(after: Any) -> int:
    if after is None:
        return 0
    if isinstance(after, bool) or not isinstance(after, int) or not 0 <= after < INT64_LIMIT:
        raise ValidationError(f"after must be a position (an integer >= 0), got "
                              f"{shown(after):.60}")
    return after


def _types(types: Any) -> tuple[str, ...] | None:
    if types is None:
        return None
    if isinstance(types, (str, bytes)) or not isinstance(types, (list, tuple)) or not all(
            isinstance(t, str) and 0 < len(t) <= 100 for t in types) or len(types) > 50:
        raise ValidationError("types must be a list of event types or patterns "
                              f"('fact.*'), at most 50; got {shown(types):.80}")
    return tuple(types)


def bounded(what: str, value: Any, low: float, high: float) -> float:
    # The range first: a huge int cannot even become a float.
    if (isinstance(value, bool) or not isinstance(value, (int, float))
            or not low <= value <= high or not math.isfinite(value)):
        raise ValidationError(f"{what} must be a number from {low:g} to {high:g}, got "
                              f"{shown(value):.60}")
    return float(value)
