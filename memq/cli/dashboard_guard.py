"""What stands in front of rq-dashboard: the admin's credentials, a Host allow-list, and no
cross-origin state change.

rq-dashboard has no protection of its own worth the name, and a browser is the attacker's
way in: a page on any site can make the person's browser POST a form to the dashboard
(emptying a queue), and DNS rebinding lets such a page read the dashboard's JSON (job
arguments hold prompts and message content) under a host name the attacker controls. So
every request must

* name an allowed host in ``Host`` (the address it listens on, the loopback names, and
  ``--allow-host`` / ``[ops] dashboard_allowed_hosts``): a rebound name is refused (421);
* carry HTTP Basic credentials equal to the Redis admin's (user name and password of the
  admin's URL, as ``admin.url`` holds them): otherwise 401;
* when it changes something (any method but GET, HEAD, OPTIONS, and rq-dashboard's GET
  ``/requeue/...``), come from the dashboard's own origin (``Origin``, else ``Referer``,
  and ``Sec-Fetch-Site`` when the browser sends it): otherwise 403.

It is a WSGI middleware with no state, so it is tested with plain HTTP requests.
"""

from __future__ import annotations

import base64
import binascii
import hmac
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlsplit

Environ = dict[str, Any]
StartResponse = Callable[..., Any]
App = Callable[[Environ, StartResponse], Iterable[bytes]]

SAFE_METHODS = frozenset({"GET", "HEAD", "OPTIONS"})
STATE_CHANGING_GETS = ("/requeue/",)
"""rq-dashboard paths that change state even on GET (``/requeue/<queue>`` requeues all)."""

LOOPBACK_HOSTS = frozenset({"127.0.0.1", "localhost", "::1"})


@dataclass(frozen=True)
class Credentials:
    username: str
    password: str

    def match(self, header: str | None) -> bool:
        """Whether an ``Authorization`` header carries exactly these (in constant time)."""
        if not header or not header.lower().startswith("basic "):
            return False
        try:
            decoded = base64.b64decode(header[6:].strip(), validate=True).decode("utf-8")
        except (binascii.Error, UnicodeDecodeError):
            return False
        username, sep, password = decoded.partition(":")
        same_user = hmac.compare_digest(username.encode(), self.username.encode())
        same_password = hmac.compare_digest(password.encode(), self.password.encode())
        return bool(sep) and same_user and same_password


class Guard:
    """The middleware: ``Guard(app, credentials, allowed_hosts)`` is a WSGI app."""

    def __init__(self, app: App, credentials: Credentials, allowed_hosts: Iterable[str]) -> None:
        self.app = app
        self.credentials = credentials
        self.allowed_hosts = frozenset(h.lower().strip("[]") for h in allowed_hosts)

    def __call__(self, environ: Environ, start_response: StartResponse) -> Iterable[bytes]:
        refusal = self.refusal(environ)
        if refusal is None:
            return self.app(environ, start_response)
        status, body, headers = refusal
        start_response(status, [("Content-Type", "text/plain; charset=utf-8"),
                                ("Content-Length", str(len(body))), *headers])
        return [body]

    def refusal(self, environ: Environ) -> tuple[str, bytes, list[tuple[str, str]]] | None:
        host = host_name(environ.get("HTTP_HOST", ""))
        if host not in self.allowed_hosts:
            return "421 Misdirected Request", b"this host name is not served here\n", []
        if not self.credentials.match(environ.get("HTTP_AUTHORIZATION")):
            return ("401 Unauthorized", b"the memq admin's credentials are needed\n",
                    [("WWW-Authenticate", 'Basic realm="memq dashboard", charset="UTF-8"')])
        if changes_state(environ) and not same_origin(environ):
            return "403 Forbidden", b"a change must come from the dashboard's own page\n", []
        return None


def host_name(header: str) -> str:
    """The host name of a ``Host`` header, without its port (``[::1]:9181`` -> ``::1``)."""
    header = header.strip().lower()
    if header.startswith("["):
        return header[1:].partition("]")[0]
    return header.rpartition(":")[0] if header.count(":") == 1 else header


def changes_state(environ: Environ) -> bool:
    method = str(environ.get("REQUEST_METHOD", "GET")).upper()
    path = str(environ.get("PATH_INFO", ""))
    return method not in SAFE_METHODS or any(part in path for part in STATE_CHANGING_GETS)


def same_origin(environ: Environ) -> bool:
    """Whether the browser says the request comes from the dashboard's own pages."""
    fetch_site = environ.get("HTTP_SEC_FETCH_SITE")
    if fetch_site is not None and fetch_site not in ("same-origin", "none"):
        return False
    own = f"{environ.get('wsgi.url_scheme', 'http')}://{environ.get('HTTP_HOST', '')}".lower()
    origin = environ.get("HTTP_ORIGIN")
    if origin is not None:
        return bool(origin.lower() == own)
    referer = environ.get("HTTP_REFERER")
    if referer is None:
        return False  # a browser sends one or the other with a form; a script may send both
    parts = urlsplit(referer)
    return f"{parts.scheme}://{parts.netloc}".lower() == own
