"""Delegated tokens: a key that may ``delegate`` mints a narrower token that lives minutes.

The pattern of a backend that starts one agent run for one end user: its key spans many
users, the run gets a token for that user alone, for 15 minutes. A delegated token is
signed, not stored: its grant and expiry travel inside it, under an HMAC-SHA256 of the
servers' shared secret (``delegation.secret`` beside the database, made like the role
tokens). So minting writes nothing, and any server of the database can check it. It dies
with its key: each use reads the key again (revoked or expired, the token is refused),
and it reaches at most what the key still reaches. It never delegates further.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import time
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

import orjson

from memq.errors import PermissionDenied, ValidationError
from memq.events.fields import SHORT, check_characters
from memq.narrowing import MAX_NAMES
from memq.printable import shown

PREFIX = "md_"
DEFAULT_MINUTES = 15.0
MAX_MINUTES = 24 * 60.0
MAX_TOKEN_CHARS = 64 * 1024
DELEGABLE = frozenset({"read", "write", "forget"})


@dataclass(frozen=True)
class Delegated:
    """What a delegated token says: its key, and the grant it narrows that key's to."""

    key_id: str
    users: frozenset[str] | None
    agents: frozenset[str] | None
    rights: frozenset[str]
    expires: float
    """Seconds since the epoch."""


class Delegations:
    def __init__(self, secret: bytes) -> None:
        self._secret = secret

    def mint(self, parent: Any, parent_expires_at: str | None, *, users: Any, agents: Any,
             can: Any, minutes: Any) -> tuple[str, str]:
        """A token for a subset of ``parent`` (a :class:`~memq.server.principals.Grant`):
        the token and when it expires (RFC 3339). ``PermissionDenied`` naming what
        exceeds the key's grant."""
        rights = _ids("can", can)
        if rights is None:
            rights = frozenset(parent.rights & DELEGABLE)
        elif not rights:  # not "the key's rights": asking for none is a mistake, not a grant
            raise ValidationError("can: name at least one right for the token")
        wanted = Delegated(parent.key_id, _narrowed("users", users, parent.users),
                           _narrowed("agents", agents, parent.agents),
                           _subset("can", rights, parent.rights & DELEGABLE),
                           _expiry(minutes, parent_expires_at))
        body = orjson.dumps({"k": wanted.key_id, "u": _listed(wanted.users),
                             "a": _listed(wanted.agents), "r": sorted(wanted.rights),
                             "e": wanted.expires})
        token = f"{PREFIX}{b64(body)}.{b64(self._sign(body))}"
        when = datetime.fromtimestamp(wanted.expires, UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
        return token, when

    def read(self, presented: str) -> Delegated | None:
        """The token's content if this server's secret signed it and it has not expired."""
        if not presented.startswith(PREFIX) or len(presented) > MAX_TOKEN_CHARS:
            return None
        body_part, _, signature = presented[len(PREFIX):].partition(".")
        try:
            body, given = unb64(body_part), unb64(signature)
        except ValueError:
            return None
        # One spelling per token: base64 lets the last character's spare bits vary.
        if b64(body) != body_part or b64(given) != signature:
            return None
        if not hmac.compare_digest(self._sign(body), given):
            return None
        data = orjson.loads(body)
        if data["e"] <= time.time():
            return None
        return Delegated(data["k"], _set(data["u"]), _set(data["a"]), frozenset(data["r"]),
                         data["e"])

    def _sign(self, body: bytes) -> bytes:
        return hmac.new(self._secret, b"memq delegated token\0" + body, hashlib.sha256).digest()


def _ids(what: str, given: Any) -> frozenset[str] | None:
    """The names of a list the caller sends, each held to the rules of every id (a name
    the token cannot be used with is refused now, not on each of its calls)."""
    if given is None:
        return None
    if isinstance(given, (str, bytes)) or not isinstance(given, (list, tuple)) or not all(
            isinstance(item, str) and item for item in given):
        raise ValidationError(f"{what} must be a list of names, got {shown(given):.60}")
    for item in given:  # the tenants' separator among the control characters
        if len(item) > SHORT:
            raise ValidationError(f"{what}: a name is {len(item)} characters, over the "
                                  f"{SHORT} limit")
        check_characters(what, item)
    return frozenset(given)


def _narrowed(what: str, given: Any, granted: frozenset[str] | None) -> frozenset[str] | None:
    asked = _ids(what, given)
    if asked is None:
        return granted
    if len(asked) > MAX_NAMES:  # the narrowing rides on each of the token's events
        raise ValidationError(f"{what}: a delegated token names at most {MAX_NAMES}, "
                              f"got {len(asked)}")
    return _subset(what, asked, granted)


def _subset(what: str, asked: frozenset[str], granted: frozenset[str] | None
            ) -> frozenset[str]:
    beyond = sorted(asked - granted) if granted is not None else []
    if beyond:
        raise PermissionDenied(f"{what} {', '.join(beyond)[:200]}: beyond this key's grant")
    return asked


def _expiry(minutes: Any, parent_expires_at: str | None) -> float:
    if minutes is None:
        minutes = DEFAULT_MINUTES
    if isinstance(minutes, bool) or not isinstance(minutes, (int, float)) or not (
            0 < minutes <= MAX_MINUTES):
        raise ValidationError(f"minutes must be a number from 0 to {MAX_MINUTES:g}, got "
                              f"{shown(minutes):.40}")
    expires = time.time() + minutes * 60
    if parent_expires_at is not None:
        parent = datetime.fromisoformat(parent_expires_at.replace("Z", "+00:00")).timestamp()
        expires = min(expires, parent)
    return round(expires, 3)


def _listed(ids: frozenset[str] | None) -> list[str] | None:
    return None if ids is None else sorted(ids)


def _set(ids: list[str] | None) -> frozenset[str] | None:
    return None if ids is None else frozenset(ids)


def b64(raw: bytes) -> str:
    return base64.urlsafe_b64encode(raw).decode().rstrip("=")


def unb64(text: str) -> bytes:
    try:
        return base64.urlsafe_b64decode(text + "=" * (-len(text) % 4))
    except (ValueError, TypeError) as exc:
        raise ValueError(str(exc)) from None
