"""Terminal "Always allow" approvals: persist, revoke, list, and check a command.

The approvals in force are those committed in the database, those of the configuration
(``[terminal] allowed_prefixes``, which cannot be revoked from here), and — so a caller
reads its own writes — the approvals and revocations this client sent that the writer
has not committed yet. Each leaves that overlay once the writer has committed past it
(``producers/pending.py``), so it can never outlive another client's later revocation.
The check itself is :func:`producers.terminal.is_command_allowed`.
"""

from __future__ import annotations

from dataclasses import dataclass

from memq.approvals import normalize_prefix
from memq.errors import NotFound, ValidationError
from memq.events import EventType
from memq.producers import terminal
from memq.producers.mixin import ClientBase, check_flag
from memq.producers.ops import Op, Read
from memq.store.read.prefixes import approved_prefixes


@dataclass(frozen=True)
class AllowedPrefix:
    prefix: str
    origin: str
    """"config", "approval" (committed) or "pending" (sent by this client, not committed)."""
    created_at: str | None = None


class PrefixesOps(ClientBase):
    """The terminal-approval operations (``producers/ops.py``) both clients run."""

    def _allow_prefix_op(self, command: str) -> Op[str]:
        prefix = normalize_prefix(command)
        yield from self._send_op(EventType.PREFIX_ALLOWED, {"prefix": prefix})
        return prefix

    def _revoke_prefix_op(self, prefix: str) -> Op[str]:
        prefix = normalize_prefix(prefix, runners_ok=True)  # one stored before RUNNERS too
        yield from self._authorize_op(EventType.PREFIX_REVOKED, {"prefix": prefix})  # first
        if prefix in self._config_prefixes():
            raise ValidationError(
                f"{prefix!r} is allowed by the configuration ([terminal] allowed_prefixes); "
                "remove it there"
            )
        if prefix not in (yield from self._effective_prefixes_op())[0]:
            raise NotFound(f"{prefix!r} is not an allowed prefix")
        yield from self._send_op(EventType.PREFIX_REVOKED, {"prefix": prefix})
        return prefix

    def _allowed_prefixes_op(self) -> Op[list[AllowedPrefix]]:
        approved, pending = yield from self._effective_prefixes_op()
        config = self._config_prefixes()
        return [_describe(p, config, pending, approved) for p in sorted(set(approved) | config)]

    def _is_command_allowed_op(self, command: str, trusted: bool) -> Op[bool]:
        if not isinstance(command, str):
            raise ValidationError(f"command must be a string, got {type(command).__name__}")
        if check_flag("trusted", trusted):
            return True
        approved, _ = yield from self._effective_prefixes_op()
        return terminal.is_command_allowed(command, set(approved) | self._config_prefixes())

    def _config_prefixes(self) -> set[str]:
        return {normalize_prefix(p) for p in self.config.terminal.allowed_prefixes}

    def _effective_prefixes_op(self) -> Op[tuple[dict[str, str | None], set[str]]]:
        """Approvals in force (prefix -> approved at) and those still pending."""
        pending = yield from self._live_op(PREFIX_EVENTS)  # before the read: see pending.py
        approved: dict[str, str | None] = yield Read(approved_prefixes)
        waiting = set()
        for event in pending:
            prefix = event.payload["prefix"]
            if event.type == EventType.PREFIX_REVOKED:
                approved.pop(prefix, None)
                waiting.discard(prefix)
            elif prefix not in approved:
                approved[prefix] = None
                waiting.add(prefix)
        return approved, waiting


PREFIX_EVENTS = (EventType.PREFIX_ALLOWED, EventType.PREFIX_REVOKED)


def _describe(
    prefix: str, config: set[str], pending: set[str], approved: dict[str, str | None]
) -> AllowedPrefix:
    if prefix in config:
        return AllowedPrefix(prefix, "config")
    if prefix in pending:
        return AllowedPrefix(prefix, "pending")
    return AllowedPrefix(prefix, "approval", approved.get(prefix))
