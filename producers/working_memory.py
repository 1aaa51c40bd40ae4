"""Working memory: the last few turns of each session, in the agent's own process.

Per session a list of at most ``cap`` messages, oldest first. A session is hydrated from
the database the first time this process touches it — by a read or by an append — so an
agent restarted in the middle of a conversation still sees its history. What this
process appends is added at once, before the writer commits it (read-your-writes).

Beyond ``max_sessions`` sessions the least recently used one is dropped; touching it
again hydrates it again. Messages this process sent but the writer had not yet committed
when their session was dropped come back only once committed.

Only this process's appends are added after hydration: turns other processes append to
the same session appear here when the session is hydrated again.
"""

from __future__ import annotations

import bisect
import threading
from collections import OrderedDict
from collections.abc import Callable
from typing import TypeVar

from producers.messages import Message, chronological_key

_R = TypeVar("_R")

Loader = Callable[[str, int], list[Message]]
"""(session_id, limit) -> that session's last ``limit`` committed messages, oldest first."""


class WorkingMemory:
    """Recent turns per session, bounded in turns per session and in sessions; thread-safe."""

    def __init__(self, load: Loader, *, cap: int, max_sessions: int) -> None:
        if cap < 1 or max_sessions < 1:
            raise ValueError(f"cap and max_sessions must be at least 1, got {cap}, {max_sessions}")
        self._load = load
        self.cap = cap
        self.max_sessions = max_sessions
        self._sessions: OrderedDict[str, list[Message]] = OrderedDict()
        self._lock = threading.Lock()

    def __contains__(self, session_id: object) -> bool:
        with self._lock:
            return session_id in self._sessions

    def __len__(self) -> int:
        with self._lock:
            return len(self._sessions)

    def hydrate(self, session_id: str) -> None:
        """Load the session from the database unless it is already here.

        The database is read outside the lock, so one slow session never blocks the
        others; when two threads hydrate the same session, the first to finish wins.
        """
        with self._lock:
            if session_id in self._sessions:
                self._sessions.move_to_end(session_id)
                return
        loaded = self._load(session_id, self.cap)
        with self._lock:
            if session_id not in self._sessions:
                self._sessions[session_id] = sorted(loaded, key=chronological_key)[-self.cap:]
                self._evict()
            self._sessions.move_to_end(session_id)

    def add(self, message: Message) -> None:
        """Remember a message this process appended; hydrates its session first."""

        def insert(turns: list[Message]) -> None:
            if any(m.id == message.id for m in turns):
                return
            # Nearly always the newest, so this is an append; an import with an older
            # created_at lands where the database would order it.
            bisect.insort(turns, message, key=chronological_key)
            del turns[: max(0, len(turns) - self.cap)]

        self._with_session(message.session_id, insert)

    def recent(self, session_id: str, limit: int) -> list[Message]:
        """The last ``limit`` messages of the session, oldest first; hydrates on first touch."""
        return self._with_session(session_id, lambda turns: turns[-limit:] if limit > 0 else [])

    def _with_session(self, session_id: str, use: Callable[[list[Message]], _R]) -> _R:
        """Hydrate, then ``use`` the session's turns under the lock."""
        while True:
            self.hydrate(session_id)
            with self._lock:
                turns = self._sessions.get(session_id)
                # Another thread may have evicted it between the two steps: hydrate again.
                if turns is not None:
                    self._sessions.move_to_end(session_id)
                    return use(turns)

    def forget(self, session_id: str) -> None:
        with self._lock:
            self._sessions.pop(session_id, None)

    def _evict(self) -> None:
        while len(self._sessions) > self.max_sessions:
            self._sessions.popitem(last=False)
