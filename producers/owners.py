"""Who each session belongs to, as far as this process knows.

The first message of a session fixes its user and agent (the writer enforces it; see
``store.projections.sessions``). So that a caller learns of a mismatch at ``append``,
not later, the client checks each append against the owner it knows: read from the
database the first time a session is touched, or set by this process's own first
append. A known owner never changes until its session is forgotten, so it can be kept;
an absent one is not cached (another process may create the session meanwhile).
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from collections.abc import Callable, Iterable

from memq.errors import ValidationError
from memq.printable import shown
from memq.store.read.sessions import Owner

Lookup = Callable[[str], Owner | None]
"""session_id -> the committed owner, or None if the session has no committed message."""


class Owners:
    """Known owners of up to ``max_sessions`` sessions, least recently used dropped."""

    def __init__(self, lookup: Lookup, *, max_sessions: int) -> None:
        self._lookup = lookup
        self.max_sessions = max_sessions
        self._known: OrderedDict[str, Owner] = OrderedDict()
        self._lock = threading.Lock()

    def get(self, session_id: str) -> Owner | None:
        """The session's owner, from memory or the database; None if nobody knows yet."""
        with self._lock:
            known = self._known.get(session_id)
            if known is not None:
                self._known.move_to_end(session_id)
                return known
        found = self._lookup(session_id)
        if found is not None:
            self._remember(session_id, found)
        return found

    def would_read(self, session_id: str, user_id: str | None, agent_id: str | None) -> bool:
        """Whether :meth:`claim` with these ids would read the database (owner unknown)."""
        if user_id is None and agent_id is None:
            return False
        with self._lock:
            return session_id not in self._known

    def claim(self, session_id: str, user_id: str | None, agent_id: str | None) -> bool:
        """Check an append with these ids; raises :class:`ValidationError` if the session
        belongs to someone else. An append that names nobody is not checked (and costs no
        read): it takes whatever owner the session has. True if this claim is what made
        the owner known (:meth:`unclaim` takes it back if the append is never sent)."""
        if user_id is None and agent_id is None:
            return False
        owner = self.get(session_id)
        if owner is None:
            self._remember(session_id, Owner(user_id, agent_id))
            return True
        for what, have, asked in (("user", owner.user_id, user_id),
                                  ("agent", owner.agent_id, agent_id)):
            if asked is not None and asked != have:
                held = f"no {what}" if have is None else f"{what} {shown(have)}"
                raise ValidationError(
                    f"session {shown(session_id)} belongs to {held}; it cannot take a message "
                    f"for {what} {shown(asked)} (the first message of a session fixes its owner)")
        return False

    def forget(self, sessions: Iterable[str] = (), users: Iterable[str] = ()) -> None:
        """Drop what is known of these sessions, and of every session of these users."""
        users = set(users)
        with self._lock:
            for session_id in [*sessions, *(s for s, o in self._known.items()
                                             if o.user_id is not None and o.user_id in users)]:
                self._known.pop(session_id, None)

    def clear(self) -> None:
        with self._lock:
            self._known.clear()

    def _remember(self, session_id: str, owner: Owner) -> None:
        with self._lock:
            self._known[session_id] = owner
            self._known.move_to_end(session_id)
            while len(self._known) > self.max_sessions:
                self._known.popitem(last=False)
