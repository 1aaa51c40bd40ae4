"""One TLS context per process for memq's HTTP clients.

httpx builds a new context for every client it is given ``verify=True``: it reads
certifi's ~150 certificates, and a client of ``memq serve`` or a webhook delivery paid it
even to reach ``http://``: a ``RemoteMemoryClient`` took 39 ms to make, 1.5 ms with the
context shared (bench/clients.py).
A context is safe to share between clients and threads: connections only read it.
"""

from __future__ import annotations

import functools
import ssl
from typing import Any

import httpx


@functools.cache
def default_context() -> ssl.SSLContext:
    """httpx's own default (certifi's CAs, or ``SSL_CERT_FILE`` / ``SSL_CERT_DIR`` as set
    when first asked), built once."""
    return httpx.create_ssl_context()


def verify(value: Any) -> Any:
    """What to pass as httpx's ``verify``: the shared default for ``True``, else ``value``
    (``False``, a path or a caller's own context) unchanged."""
    return default_context() if value is True else value
