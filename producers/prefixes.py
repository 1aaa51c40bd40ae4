"""Terminal "Always allow" approvals: persist, revoke, list, and check a command.

The approvals in force are those committed in the database, those of the configuration
(``[terminal] allowed_prefixes``, which cannot be revoked from here), and — so a caller
reads its own writes — the approvals and revocations this client sent that the writer
has not committed yet. That overlay is dropped as soon as everything this client sent is
committed, so it can never outlive another client's later revocation. The check itself
is :func:`producers.terminal.is_command_allowed`.
"""

from __future__ import annotations

from dataclasses import dataclass

from memq.approvals import normalize_prefix
from memq.errors import NotFound, ValidationError
from memq.events import EventType
from producers import terminal
from producers.mixin import ClientBase, check_flag
from store.prefix_reads import approved_prefixes


@dataclass(frozen=True)
class AllowedPrefix:
    prefix: str
    origin: str
    """"config", "approval" (committed) or "pending" (sent by this client, not committed)."""
    created_at: str | None = None


class PrefixesMixin(ClientBase):
    def allow_prefix(self, command: str) -> str:
        """Approve ``command`` as an always-allowed prefix; returns its stored form."""
        prefix = normalize_prefix(command)
        self._send(EventType.PREFIX_ALLOWED, {"prefix": prefix})
        self._prefix_overlay()[prefix] = True
        return prefix

    def revoke_prefix(self, prefix: str) -> str:
        """Withdraw an approval; returns the stored form that was revoked."""
        prefix = normalize_prefix(prefix)
        if prefix in self._config_prefixes():
            raise ValidationError(
                f"{prefix!r} is allowed by the configuration ([terminal] allowed_prefixes); "
                "remove it there"
            )
        if prefix not in self._effective_prefixes()[0]:
            raise NotFound(f"{prefix!r} is not an allowed prefix")
        self._send(EventType.PREFIX_REVOKED, {"prefix": prefix})
        self._prefix_overlay()[prefix] = False
        return prefix

    def allowed_prefixes(self) -> list[AllowedPrefix]:
        """Every prefix in force, sorted, with where it comes from."""
        approved, pending = self._effective_prefixes()
        config = self._config_prefixes()
        return [_describe(p, config, pending, approved) for p in sorted(set(approved) | config)]

    def is_command_allowed(self, command: str, *, trusted: bool = False) -> bool:
        """True if ``command`` may run without asking (a trusted task's always may)."""
        if not isinstance(command, str):
            raise ValidationError(f"command must be a string, got {type(command).__name__}")
        if check_flag("trusted", trusted):
            return True
        approved, _ = self._effective_prefixes()
        return terminal.is_command_allowed(command, set(approved) | self._config_prefixes())

    def _config_prefixes(self) -> set[str]:
        return {normalize_prefix(p) for p in self.config.terminal.allowed_prefixes}

    def _effective_prefixes(self) -> tuple[dict[str, str | None], set[str]]:
        """Approvals in force (prefix -> approved at) and those still pending."""
        overlay = self._live_overlay()  # before the read: what is committed is then visible
        with self.readers.connection() as conn:
            approved = approved_prefixes(conn)
        pending = set()
        for prefix, allowed in overlay.items():
            if allowed and prefix not in approved:
                approved[prefix] = None
                pending.add(prefix)
            elif not allowed:
                approved.pop(prefix, None)
        return approved, pending

    def _live_overlay(self) -> dict[str, bool]:
        overlay = self._prefix_overlay()
        if overlay and not self.outbox.buffered:
            committed, sent = self.outbox.committed(), self.outbox.last_sent
            if committed is not None and sent is not None and committed >= sent:
                overlay.clear()
        return dict(overlay)

    def _prefix_overlay(self) -> dict[str, bool]:
        # Created on first use: the mixin adds no constructor to MemoryClient.
        overlay: dict[str, bool] | None = self.__dict__.get("_prefix_changes")
        if overlay is None:
            overlay = self.__dict__["_prefix_changes"] = {}
        return overlay


def _describe(
    prefix: str, config: set[str], pending: set[str], approved: dict[str, str | None]
) -> AllowedPrefix:
    if prefix in config:
        return AllowedPrefix(prefix, "config")
    if prefix in pending:
        return AllowedPrefix(prefix, "pending")
    return AllowedPrefix(prefix, "approval", approved.get(prefix))
