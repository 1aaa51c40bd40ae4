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

from memq import tenants
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

    def _allow_prefix_op(self, command: str, tenant: str | None) -> Op[str]:
        prefix = normalize_prefix(command)
        yield from self._send_op(EventType.PREFIX_ALLOWED, _payload(prefix, tenant))
        return prefix

    def _revoke_prefix_op(self, prefix: str, tenant: str | None) -> Op[str]:
        prefix = normalize_prefix(prefix, runners_ok=True)  # one stored before RUNNERS too
        tenant = _tenant(tenant)
        payload = _payload(prefix, tenant)
        yield from self._authorize_op(EventType.PREFIX_REVOKED, payload)  # first
        if prefix in self._config_prefixes(tenant):
            raise ValidationError(
                f"{prefix!r} is allowed by the configuration ([terminal] allowed_prefixes); "
                "remove it there"
            )
        if prefix not in (yield from self._effective_prefixes_op(tenant))[0]:
            raise NotFound(f"{prefix!r} is not an allowed prefix")
        yield from self._send_op(EventType.PREFIX_REVOKED, payload)
        return prefix

    def _allowed_prefixes_op(self, tenant: str | None) -> Op[list[AllowedPrefix]]:
        tenant = _tenant(tenant)
        approved, pending = yield from self._effective_prefixes_op(tenant)
        config = self._config_prefixes(tenant)
        return [_describe(p, config, pending, approved) for p in sorted(set(approved) | config)]

    def _is_command_allowed_op(self, command: str, trusted: bool, tenant: str | None
                               ) -> Op[bool]:
        tenant = _tenant(tenant)
        if not isinstance(command, str):
            raise ValidationError(f"command must be a string, got {type(command).__name__}")
        if check_flag("trusted", trusted):
            return True
        approved, _ = yield from self._effective_prefixes_op(tenant)
        return terminal.is_command_allowed(command,
                                           set(approved) | self._config_prefixes(tenant))

    def _config_prefixes(self, tenant: str) -> set[str]:
        """The configuration's approvals: the deployment's own, so the default tenant's."""
        if tenant != tenants.DEFAULT:
            return set()
        return {normalize_prefix(p) for p in self.config.terminal.allowed_prefixes}

    def _effective_prefixes_op(self, tenant: str
                               ) -> Op[tuple[dict[str, str | None], set[str]]]:
        """Approvals in force in ``tenant`` (prefix -> approved at) and those pending."""
        pending = yield from self._live_op(PREFIX_EVENTS)  # before the read: see pending.py
        approved: dict[str, str | None] = yield Read(approved_prefixes, (tenant,))
        waiting = set()
        for event in pending:
            if event.payload.get("tenant", tenants.DEFAULT) != tenant:
                continue
            prefix = event.payload["prefix"]
            if event.type == EventType.PREFIX_REVOKED:
                approved.pop(prefix, None)
                waiting.discard(prefix)
            elif prefix not in approved:
                approved[prefix] = None
                waiting.add(prefix)
        return approved, waiting


def _tenant(tenant: str | None) -> str:
    return tenants.DEFAULT if tenant is None else tenants.check_name(tenant)


def _payload(prefix: str, tenant: str | None) -> dict[str, str]:
    """An approval's event: the default tenant's names none (as before tenants)."""
    tenant = _tenant(tenant)
    return {"prefix": prefix} if tenant == tenants.DEFAULT else {"prefix": prefix,
                                                                "tenant": tenant}


PREFIX_EVENTS = (EventType.PREFIX_ALLOWED, EventType.PREFIX_REVOKED)


def _describe(
    prefix: str, config: set[str], pending: set[str], approved: dict[str, str | None]
) -> AllowedPrefix:
    if prefix in config:
        return AllowedPrefix(prefix, "config")
    if prefix in pending:
        return AllowedPrefix(prefix, "pending")
    return AllowedPrefix(prefix, "approval", approved.get(prefix))
