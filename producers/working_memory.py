"""Working memory: the last few turns of each session, in the agent's own process.

Per session, two things: what the database last showed of it (its last ``cap`` items,
oldest first, and the session's *mark* then), and the turns this process appended that
the writer may not have committed yet. Reads merge the two, so a caller always sees its
own turns (read-your-writes).

Fresh across processes: :meth:`WorkingMemory.sync`, run at the start of every
``get_context``, reads the session's mark — the log position of the last committed change
to its messages, one primary-key lookup — and loads the session again only when the mark
differs from the one its copy was read at. So every turn committed before the call is
seen, whoever wrote it, and so are a consolidation or a forget; an untouched session
costs the lookup alone.

An own turn leaves the pending list once a load shows it committed, or once the writer's
commit position has passed it (a turn the writer rejected, or one consolidated or
forgotten since, then disappears too). Beyond ``max_sessions`` sessions the least
recently used one is dropped, pending turns included: those come back once committed.
"""

from __future__ import annotations

import bisect
import threading
from collections import OrderedDict
from collections.abc import Callable, Collection
from dataclasses import dataclass, field

from memq.producers.outbox import Position, Ticket
from memq.store.read.messages import Message, chronological_key
from memq.store.read.sessions import SessionSnapshot

Loader = Callable[[str, int], SessionSnapshot]
"""(session_id, limit) -> that session's mark and last ``limit`` committed items."""

MarkReader = Callable[[str], "int | None"]
"""session_id -> the session's committed mark (None: nothing committed for it)."""

PositionReader = Callable[[], "Position | None"]
"""The writer's commit position in the inbox, None when it cannot be told."""


@dataclass(frozen=True)
class Pending:
    """A turn this process appended, and where its event went."""

    message: Message
    ticket: Ticket


@dataclass
class _Session:
    committed: list[Message] = field(default_factory=list)
    mark: int | None = None
    log_position: int = -1
    """Of the snapshot in ``committed``; -1: never loaded."""
    pending: list[Pending] = field(default_factory=list)


class WorkingMemory:
    """Recent turns per session, bounded in turns per session and in sessions; thread-safe."""

    def __init__(
        self, load: Loader, mark: MarkReader, *, cap: int, max_sessions: int,
        commit_position: PositionReader | None = None,
    ) -> None:
        if cap < 1 or max_sessions < 1:
            raise ValueError(f"cap and max_sessions must be at least 1, got {cap}, {max_sessions}")
        self._load = load
        self._mark = mark
        self._commit_position = commit_position or (lambda: None)
        self.cap = cap
        self.max_sessions = max_sessions
        self._sessions: OrderedDict[str, _Session] = OrderedDict()
        self._lock = threading.Lock()

    def __contains__(self, session_id: object) -> bool:
        with self._lock:
            return session_id in self._sessions

    def __len__(self) -> int:
        with self._lock:
            return len(self._sessions)

    def sync(self, session_id: str) -> None:
        """Load the session again if the database changed it since its copy was read."""
        mark = self._mark(session_id)
        with self._lock:
            entry = self._sessions.get(session_id)
            if entry is not None and entry.log_position >= 0 and entry.mark == mark:
                self._sessions.move_to_end(session_id)
                return
        self._reload(session_id)

    def add(self, message: Message, ticket: Ticket | None = None) -> None:
        """Remember a turn this process appended (its ticket tells when it is committed)."""
        pending = Pending(message, ticket or Ticket(message.id))
        with self._lock:
            entry = self._entry(message.session_id)
            if any(p.message.id == message.id for p in entry.pending):
                return
            # Nearly always the newest, so this is an append; an import with an older
            # created_at lands where the database would order it.
            bisect.insort(entry.pending, pending, key=lambda p: chronological_key(p.message))
            del entry.pending[: max(0, len(entry.pending) - self.cap)]
            self._evict()

    def recent(self, session_id: str, limit: int) -> list[Message]:
        """The last ``limit`` turns of the session, oldest first: its committed items and
        this process's pending turns. Loads the session on first touch (no freshness
        check: :meth:`sync` does that)."""
        while True:
            with self._lock:
                entry = self._sessions.get(session_id)
                # Another thread may evict it between the load and here: load it again.
                if entry is not None and entry.log_position >= 0:
                    self._sessions.move_to_end(session_id)
                    merged = merge_turns(entry.committed, [p.message for p in entry.pending])
                    return merged[-limit:] if limit > 0 else []
            self._reload(session_id)

    def pending(self, session_id: str) -> list[Pending]:
        """This process's turns of the session that may not be committed yet, oldest first."""
        with self._lock:
            entry = self._sessions.get(session_id)
            return [] if entry is None else list(entry.pending)

    def drop(self, event_ids: Collection[str]) -> None:
        """Forget pending turns the writer will never commit (it rejected their events)."""
        with self._lock:
            for entry in self._sessions.values():
                entry.pending = [p for p in entry.pending if p.ticket.event_id not in event_ids]

    def forget(self, session_id: str) -> None:
        with self._lock:
            self._sessions.pop(session_id, None)

    def _reload(self, session_id: str) -> None:
        with self._lock:
            has_pending = bool(self._entry(session_id).pending)
        # The commit position before the database: every event at or below it is then in
        # what the load reads, so a pending turn settled by it is never lost from view.
        committed = self._commit_position() if has_pending else None
        snapshot = self._load(session_id, self.cap)
        with self._lock:
            entry = self._entry(session_id)
            # Two threads may load one session at once: keep the newer snapshot.
            if snapshot.log_position >= entry.log_position:
                entry.committed, entry.mark = snapshot.items, snapshot.mark
                entry.log_position = snapshot.log_position
            seen = {m.id for m in snapshot.items}
            entry.pending = [p for p in entry.pending
                             if p.message.id not in seen and not p.ticket.settled(committed)]
            self._evict()

    def _entry(self, session_id: str) -> _Session:
        """The session's entry, created empty if missing, as the most recently used; the
        caller holds the lock."""
        entry = self._sessions.get(session_id)
        if entry is None:
            entry = self._sessions[session_id] = _Session()
        self._sessions.move_to_end(session_id)
        return entry

    def _evict(self) -> None:
        while len(self._sessions) > self.max_sessions:
            self._sessions.popitem(last=False)


def merge_turns(committed: list[Message], pending: list[Message]) -> list[Message]:
    """Both lists in chronological order, each message once (pending ones already in the
    database are taken from there)."""
    known = {m.id for m in committed}
    extra = [m for m in pending if m.id not in known]
    if not extra:
        return committed
    return sorted([*committed, *extra], key=chronological_key)
