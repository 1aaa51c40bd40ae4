"""API keys: the person mints a key for an agent deployment, naming the users and agents
it may reach and what it may do there; ``memq serve`` then lets its bearer reach only that
(``server/grants.py``).

A key is an event (``key.created``, ``key.revoked``: admin only), so it survives a rebuild,
a backup and a restore. The secret is made here, shown once in the answer, and only its
SHA-256 travels and is kept: a leaked log or database copy names no usable key.
"""

from __future__ import annotations

import hashlib
import re
import secrets
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from memq import tenants
from memq.authority import Role
from memq.clock import normalize_rfc3339
from memq.errors import NotFound, PermissionDenied, ValidationError
from memq.events import EventType, check_identifier
from memq.events.rules import RIGHTS
from memq.printable import shown
from memq.producers.mixin import ClientBase
from memq.producers.ops import AskRole, Op, Read
from memq.store.read.keys import ApiKey, key_with_digest, keys

TOKEN = re.compile(r"mk_([a-f0-9]{16})_[A-Za-z0-9_-]{43}")
"""A key's bearer token: ``mk_``, the key's id, ``_``, 32 random bytes (URL-safe base64)."""


@dataclass(frozen=True)
class NewKey:
    id: str
    secret: str
    """The bearer token: shown this once, kept nowhere (only its digest is)."""


@dataclass(frozen=True)
class DelegatedToken:
    """A narrower, short-lived token a key minted (``RemoteMemoryClient.delegate``)."""

    token: str
    expires_at: str


def digest(token: str) -> str:
    return hashlib.sha256(token.encode("utf-8", "replace")).hexdigest()


class KeysOps(ClientBase):
    """Minting, listing and revoking keys: the person's (admin) alone."""

    def _create_key_op(
        self, name: str, users: Sequence[str] | None, agents: Sequence[str] | None,
        can: Sequence[str], expires_at: datetime | str | None, units_per_s: int | None,
        concurrent: int | None, tenant: str,
    ) -> Op[NewKey]:
        key_id = secrets.token_hex(8)
        token = f"mk_{key_id}_{secrets.token_urlsafe(32)}"
        payload: dict[str, Any] = {
            "key_id": key_id, "name": check_identifier("name", name),
            "secret_sha256": digest(token), "users": _ids("users", users),
            "agents": _ids("agents", agents), "rights": _rights(can),
            "expires_at": None if expires_at is None
            else normalize_rfc3339(expires_at, what="expires_at"),
            "units_per_s": units_per_s, "concurrent": concurrent,
            "tenant": tenants.check_name(tenant),
        }
        yield from self._send_op(EventType.KEY_CREATED, payload)
        return NewKey(key_id, token)

    def _api_keys_op(self) -> Op[list[ApiKey]]:
        yield from self._person_op("listing keys")
        found: list[ApiKey] = yield Read(keys)
        return found

    def _revoke_key_op(self, key_id: str) -> Op[str]:
        yield from self._person_op("revoking a key")
        if not isinstance(key_id, str) or (yield Read(key_with_digest, (key_id,))) is None:
            raise NotFound(f"no key {shown(key_id):.40}")
        yield from self._send_op(EventType.KEY_REVOKED, {"key_id": key_id})
        return key_id

    def _person_op(self, action: str) -> Op[None]:
        if (yield AskRole(action)) is not Role.ADMIN:
            raise PermissionDenied(f"{action} is the person's: admin credentials only")


def _rights(can: Sequence[str]) -> list[str]:
    rights = _ids("can", can) or []
    if not rights or set(rights) - RIGHTS or len(set(rights)) != len(rights):
        raise ValidationError(f"can must list what the key may do, each once, among "
                              f"{', '.join(sorted(RIGHTS))}; got {shown(can):.80}")
    return rights


def _ids(what: str, given: Sequence[str] | None) -> list[str] | None:
    if given is None:
        return None
    if isinstance(given, (str, bytes)) or not isinstance(given, Sequence):
        raise ValidationError(f"{what} must be a list, got {type(given).__name__}")
    for item in given:
        if isinstance(item, str) and tenants.SEPARATOR in item:
            raise ValidationError(f"{what} names the users (or agents) inside the key's "
                                  "tenant: an id with a control character is none of them")
    return [check_identifier(what, item) for item in given]


__all__ = ["TOKEN", "ApiKey", "DelegatedToken", "KeysOps", "NewKey", "digest"]
