"""What a search spans: one session, every session of its user, or of its user's agent.

A scope is resolved from the session that asks and that session's owner, and never
crosses users: ``user`` is every session of the session's user, ``agent`` every session
of the same user *and* agent. A session without a user (or, for ``agent``, without an
agent) searches only itself: a missing owner never widens a search.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, NamedTuple

from memq.printable import shown
from memq.store.lexical import agent_token, session_token, user_token

KINDS = ("session", "user", "agent")
"""The scopes ``get_context`` accepts."""


class Owner(NamedTuple):
    """Who a session belongs to: a user (None: nobody) and optionally one of its agents."""

    user_id: str | None
    agent_id: str | None = None


@dataclass(frozen=True)
class Scope:
    """The asking session and what is searched (``kind`` is the scope actually searched)."""

    session_id: str
    kind: str = "session"
    user_id: str | None = None
    agent_id: str | None = None

    @classmethod
    def of(cls, session_id: str, kind: str, owner: Owner | None) -> Scope:
        """The scope ``kind`` for ``session_id`` whose owner is ``owner`` (None: unknown)."""
        if kind not in KINDS:
            raise ValueError(f"scope must be one of {', '.join(KINDS)}, got {shown(kind)}")
        user, agent = owner if owner is not None else (None, None)
        if kind == "agent" and user is not None and agent is not None:
            return cls(session_id, "agent", user, agent)
        if kind == "user" and user is not None:
            return cls(session_id, "user", user)
        return cls(session_id)

    @property
    def key(self) -> tuple[str, ...]:
        """Identifies what is searched (the asking session matters only at session scope)."""
        if self.kind == "session":
            return ("session", self.session_id)
        if self.kind == "user":
            return ("user", str(self.user_id))
        return ("agent", str(self.user_id), str(self.agent_id))

    def condition(self, table: str = "messages") -> str:
        """SQL condition on ``table`` (a ``messages`` row or alias) for the scope's rows;
        its parameters are :meth:`params`."""
        if self.kind == "session":
            return f"{table}.session_id = :scope_session"
        if self.kind == "user":
            return f"{table}.user_id = :scope_user"
        return f"{table}.user_id = :scope_user AND {table}.agent_id = :scope_agent"

    def params(self) -> dict[str, Any]:
        return {"scope_session": self.session_id, "scope_user": self.user_id,
                "scope_agent": self.agent_id}

    @property
    def index(self) -> str:
        """The ``messages`` index that lists the scope's rows by time."""
        return {"session": "messages_by_session", "user": "messages_by_user",
                "agent": "messages_by_agent"}[self.kind]

    def match(self) -> str:
        """The FTS5 column filters that keep a lexical search inside the scope."""
        if self.kind == "session":
            return f'session : "{session_token(self.session_id)}"'
        user = f'user : "{user_token(str(self.user_id))}"'
        if self.kind == "user":
            return user
        return f'{user} AND agent : "{agent_token(str(self.agent_id))}"'

