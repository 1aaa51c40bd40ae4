"""A client whose every call is first admitted against the caller's grant.

What ``memq serve``'s routes do for each request (the key's budget spent and
``grants.admit`` before, ``shown_to`` after), for servers that call the client
themselves: ``memq mcp --http``, whose tools act through one in-process client while each
request comes with a key of its own. The request's grant is read from a context variable
the server's door sets for each request; None is a shared token (the role's every right).
"""

from __future__ import annotations

import inspect
import threading
from collections import OrderedDict
from contextlib import AbstractContextManager, nullcontext
from contextvars import ContextVar
from typing import Any

from memq.producers.client import MemoryClient
from memq.producers.operations import OPERATIONS, Kind, Operation
from memq.producers.surface import Surface
from memq.server import grants
from memq.server.budgets import Budgets, cost
from memq.server.principals import Grant

CALLER: ContextVar[Grant | None] = ContextVar("memq_caller_grant", default=None)
"""The grant of the request being served (set by the server's door for each request)."""

MAX_CALLERS = 10_000
"""Grants whose clients are kept, the most recently used: each delegated token is a grant
of its own, so a long-running server would otherwise keep one per token it ever saw. A
grant pushed out loses only its uncommitted turns from its reads, until they commit."""


class GrantedClient:
    """``base``'s methods of the table, each admitted against :data:`CALLER`'s grant. A
    key's calls read through ``base`` and send through an outbox of their own on
    ``keyed``'s credentials (the admin's, the only ones that may push the keys' queue),
    naming the key, so the writer checks and records it. Anything else is ``base``'s.
    With ``budgets``, each call spends its key's budget first, as the same call through
    ``memq serve`` would (None: nothing is counted)."""

    def __init__(self, base: MemoryClient, keyed: MemoryClient, *,
                 budgets: Budgets | None = None, cap: int = MAX_CALLERS) -> None:
        self.base = base
        self.keyed = keyed
        self.budgets = budgets
        self.cap = cap
        # Per grant, not per key: a delegated token is a caller of its own.
        self._for_grant: OrderedDict[Grant, tuple[MemoryClient, set[str]]] = OrderedDict()
        self._lock = threading.Lock()  # the tools run in worker threads

    def __getattr__(self, name: str) -> Any:
        op = OPERATIONS.get(name)
        if op is None:
            return getattr(self.base, name)
        signature = inspect.signature(getattr(Surface, name))

        def call(*args: Any, **kwargs: Any) -> Any:
            bound = signature.bind(None, *args, **kwargs)
            bound.apply_defaults()
            given = {k: v for k, v in bound.arguments.items() if k != "self"}
            grant = CALLER.get()
            # Spent before the grant is checked, as memq serve's routes do: a refused call
            # costs its caller too, or probing what lies outside the grant would be free.
            with self._spending(grant, op, given):
                client, claimed = self._client(grant)
                stored = grants.admit(grant, op, given, client, claimed)
                answered = getattr(client, name)(**stored)
                if grant is not None and name in grants.APPENDS:
                    claimed.update(grants.sessions_named(op, given))
                return grants.shown_to(grant, op, answered)

        return call

    def _spending(self, grant: Grant | None, op: Operation,
                  given: dict[str, Any]) -> AbstractContextManager[None]:
        """The key's place and units for one call (``RateLimited`` when it has none)."""
        if self.budgets is None:
            return nullcontext()
        writes = op.kind is Kind.WRITE
        return self.budgets.spend(grant, cost(op.name, given, writes=writes), writes=writes)

    def _client(self, grant: Grant | None) -> tuple[MemoryClient, set[str]]:
        if grant is None:
            return self.base, set()
        with self._lock:
            found = self._for_grant.get(grant)
            if found is None:
                client = self.base.with_own_outbox(self.keyed, private=True)
                grants.as_key(client, grant)
                found = self._for_grant[grant] = (client, set())
                while len(self._for_grant) > self.cap:
                    self._for_grant.popitem(last=False)
            self._for_grant.move_to_end(grant)
            return found
