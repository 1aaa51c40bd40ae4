"""What every feature of the local clients builds on.

Each feature (context, facts, macros, terminal approvals, tasks) lives in its own module
as *operations* (``producers/ops.py``, ``_<name>_op``) in a class that subclasses
:class:`ClientBase` — the one place that says what they may use (the settings, the read
pool, pending writes) and that turns a payload into a validated event on its way to the
writer. The methods themselves are written once, in ``producers/surface.py``; a local
client's transport runs the operation of the same name with :class:`SyncClientBase`'s
driver (sync) or ``AsyncMemoryClient``'s (async).
"""

from __future__ import annotations

import os
import time
from collections.abc import Collection
from typing import Any, TypeVar

import redis

from memq import authority, broker
from memq import config as config_module
from memq.authority import Role
from memq.clock import now_rfc3339, uuid7
from memq.config import Config
from memq.errors import BrokerError, ValidationError
from memq.events import Event, check_payload
from memq.printable import shown
from memq.producers import ops
from memq.producers.ops import Op, Request, drive
from memq.producers.outbox import Outbox, Position
from memq.producers.pending import PendingWrites
from memq.store.read.pool import ReadPool

T = TypeVar("T")


class ClientBase:
    """The attributes both clients set, and the operations they share (``ops.py``)."""

    config: Config
    readers: ReadPool
    pending_writes: PendingWrites
    """This client's uncommitted writes that its reads show (read-your-writes)."""

    def _event(
        self,
        etype: str,
        payload: dict[str, Any],
        *,
        session_id: str | None = None,
        created_at: str | None = None,
    ) -> Event:
        """The event for ``payload``, checked with the writer's own schema.

        The schema is the only place that says what a field may hold; its message is
        reworded for a caller, who passed ``role``, not ``message.appended: payload.role``.
        """
        try:
            check_payload(etype, payload, self.config.limits)
        except ValidationError as exc:
            reason = str(exc).removeprefix(f"{etype}: ").removeprefix("payload.")
            raise ValidationError(reason) from None
        return Event(id=uuid7(), type=etype, session_id=session_id,
                     created_at=created_at or now_rfc3339(), payload=payload)

    def _send_op(
        self,
        etype: str,
        payload: dict[str, Any],
        *,
        session_id: str | None = None,
        created_at: str | None = None,
    ) -> Op[str]:
        """Validate, then send to the writer without waiting; returns the event id.

        :class:`~memq.errors.PermissionDenied` if this client's role may not send it (the
        writer would reject it for the same reason), and nothing is sent.
        """
        event = self._event(etype, payload, session_id=session_id, created_at=created_at)
        yield from self._authorize_op(etype, payload)
        ticket = yield ops.Send(event)
        self.pending_writes.track(ticket, event)
        return event.id

    def _authorize_op(self, etype: str, payload: dict[str, Any]) -> Op[None]:
        """:class:`~memq.errors.PermissionDenied` unless this client's role may send it."""
        role = yield ops.AskRole("sending an event")
        authority.check(role, etype, payload)

    def _live_op(self, types: Collection[str]) -> Op[list[Event]]:
        """This client's pending events of these types (read-your-writes), settled against
        the commit position, which is read only if any is pending (``pending.py``)."""
        committed = (yield ops.AskPosition()) if self.pending_writes.waiting(types) else None
        return self.pending_writes.settle(types, committed)

    def _commit_position(self) -> Position | None:
        """The writer's commit position, for work that runs as one piece (``Run``)."""
        raise NotImplementedError


class SyncClientBase(ClientBase):
    """The sync driver: answers an operation's requests with blocking I/O."""

    outbox: Outbox
    redis: redis.Redis

    def _run(self, op: Op[T]) -> T:
        return drive(op, self._answer)

    def _call(self, name: str, arguments: dict[str, Any]) -> Any:
        """The transport of :class:`~memq.producers.surface.Surface`: run the operation."""
        return self._run(operation(self, name, arguments))

    def _answer(self, request: Request) -> Any:
        match request:
            case ops.Send(event):
                return self.outbox.send(event)
            case ops.SendMany(events):
                return self.outbox.send_many(events)
            case ops.AskRole(action):
                return self.outbox.resolve_role(action)
            case ops.AskPosition():
                return self._commit_position()
            case ops.Read(fn, args):
                with self.readers.connection() as conn:
                    return fn(conn, *args)
            case ops.Run(fn, args):
                return fn(*args)
            case ops.Flush(timeout):
                return self.outbox.flush(timeout)
            case ops.Fetch(key, action):
                with broker.translated(self.config.redis_url, action):
                    return self.redis.get(key)
            case ops.Sleep(seconds):
                return time.sleep(seconds)
        raise TypeError(f"unknown request {request!r}")

    def _send(
        self,
        etype: str,
        payload: dict[str, Any],
        *,
        session_id: str | None = None,
        created_at: str | None = None,
    ) -> str:
        """Validate, then send to the writer without waiting; returns the event id."""
        return self._run(self._send_op(etype, payload, session_id=session_id,
                                       created_at=created_at))

    def _commit_position(self) -> Position | None:
        """The writer's commit position, or None while Redis cannot tell (reads go on)."""
        try:
            return self.outbox.committed()
        except BrokerError:
            return None

    @property
    def role(self) -> Role:
        """The role Redis says this client's credentials hold (agent, worker or admin)."""
        return self.outbox.role


def operation(client: ClientBase, name: str, arguments: dict[str, Any]) -> Op[Any]:
    """The operation of the method ``name`` called with ``arguments`` (its ``locals()``)."""
    make = getattr(client, f"_{name}_op")
    return make(**{k: v for k, v in arguments.items() if k != "self"})  # type: ignore[no-any-return]


def settings(
    redis_url: str | None, db_path: str | os.PathLike[str] | None, config: Config | None
) -> Config:
    """A client's settings: ``config`` (or memq.toml and the environment), with the Redis
    URL and the database path given to its constructor winning."""
    if config is None:
        config = config_module.load(db_path=None if db_path is None else str(db_path),
                                    redis_url=redis_url)
    return config.replace(redis_url=redis_url or config.redis_url,
                          db_path=str(db_path or config.db_path))


def settings_of_role(role: str) -> Config:
    """What ``from_env(role)`` reads (see :meth:`MemoryClient.from_env`)."""
    if role not in set(Role):
        raise ValidationError(
            f"role must be one of agent, worker, admin, got {shown(role):.60}")
    return config_module.load(role=str(role))


def check_flag(what: str, value: object) -> bool:
    """A keyword that must be a real bool: a truthy string must not pass for True."""
    if not isinstance(value, bool):
        raise ValidationError(f"{what} must be True or False, got {shown(value):.60}")
    return value
