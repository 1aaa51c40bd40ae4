"""The console's login: a token in, a signed session cookie out.

The person signs in with the admin token; an API key signs in to a read-only view of its
own grant. The token is typed once; the browser keeps only a cookie that names no secret:
an HMAC-signed body (the servers' shared secret, as for delegated tokens) holding when it
expires, a random nonce, and a fingerprint of the admin token it was made from or the
key's id. So any server of the database reads it, a rotated ``admin.token`` ends every
session made with the old one, and a revoked key ends its own (``state.py`` asks). The
cookie is ``HttpOnly`` (no script reads it), ``SameSite=Strict`` (no other site's page
sends it) and scoped to ``/ui``.

Every form carries the session's CSRF token, derived from its nonce under the same
secret: a page elsewhere can neither read it nor make one.
"""

from __future__ import annotations

import hashlib
import hmac
import secrets
import time
from collections.abc import Callable
from dataclasses import dataclass

import orjson

from memq.server.delegation import b64, unb64
from memq.server.principals import Grant

COOKIE = "memq_console"
LIFETIME_S = 8 * 3600.0
"""A working day; then the person types the token again."""
MAX_COOKIE_CHARS = 1024


@dataclass(frozen=True)
class Login:
    """A live console session."""

    csrf: str
    expires: float
    nonce: str
    """Its own: a sign-out records it as ended (``state.py``), for every server."""
    key_id: str | None = None
    """None: the person's session; else the key whose grant it reads."""
    grant: Grant | None = None
    """The key's grant, as found live when a page was asked for (``state.signed_in``)."""


class Logins:
    """Sessions for the admin token (``admin()``) and for the keys ``key_of`` knows."""

    def __init__(self, secret: bytes, admin: Callable[[], str | None],
                 key_of: Callable[[str], Grant | None] = lambda presented: None) -> None:
        self._secret = secret
        self._admin = admin
        self._key_of = key_of

    def start(self, presented: str) -> str | None:
        """A session cookie's value for ``presented``, or None if it is neither the admin
        token nor a key's secret (an agent's token, a delegated token: not the console's)."""
        token = self._admin()
        if token is not None and hmac.compare_digest(presented.encode(), token.encode()):
            return self._cookie({"f": _fingerprint(token)})
        grant = self._key_of(presented)
        if grant is None or grant.delegated:
            return None
        return self._cookie({"k": grant.key_id})

    def _cookie(self, who: dict[str, str]) -> str:
        body = orjson.dumps({**who, "e": time.time() + LIFETIME_S,
                             "n": secrets.token_urlsafe(16)})
        return f"{b64(body)}.{b64(self._sign(b'session', body))}"

    def read(self, cookie_header: str) -> Login | None:
        """The session a ``Cookie`` header carries, if this server made it and it lives."""
        value = _cookie(cookie_header, COOKIE)
        if value is None or len(value) > MAX_COOKIE_CHARS:
            return None
        body_part, _, signature = value.partition(".")
        try:
            body, given = unb64(body_part), unb64(signature)
        except ValueError:
            return None
        # One spelling per cookie: base64 lets the last character's spare bits vary.
        if b64(body) != body_part or b64(given) != signature or not hmac.compare_digest(
                self._sign(b"session", body), given):
            return None
        data = orjson.loads(body)
        if data["e"] <= time.time() or not (
                "k" in data or self._admin_current(data.get("f", ""))):
            return None
        return Login(b64(self._sign(b"csrf", data["n"].encode())), data["e"], data["n"],
                     key_id=data.get("k"))

    def _admin_current(self, fingerprint: str) -> bool:
        token = self._admin()
        return token is not None and hmac.compare_digest(fingerprint, _fingerprint(token))

    def _sign(self, purpose: bytes, body: bytes) -> bytes:
        return hmac.new(self._secret, b"memq console " + purpose + b"\0" + body,
                        hashlib.sha256).digest()


def csrf_ok(login: Login, given: str | None) -> bool:
    return given is not None and hmac.compare_digest(login.csrf.encode(), given.encode())


def _fingerprint(token: str) -> str:
    return hashlib.sha256(b"memq console\0" + token.encode()).hexdigest()[:32]


def _cookie(header: str, name: str) -> str | None:
    """The value of cookie ``name`` in a ``Cookie`` header. Split by hand, in one pass:
    the standard library's parser drops every cookie of a header holding one it finds
    malformed (another site's on the same host, since cookies ignore ports), and unquotes
    in quadratic time (a request's worth of backslashes held the event loop for 0.6 s)."""
    for part in header.split(";"):
        key, sep, value = part.partition("=")
        if sep and key.strip() == name:
            return value.strip()
    return None
