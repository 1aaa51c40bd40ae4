"""How ``memq serve`` tells the writer what a delegated token narrows its key to.

A delegated token (``server/delegation.py``) reaches a subset of its key's users, agents
and rights. Its events carry that subset beside the key's id in the entry's sender field
(``sender:key:narrowing``), on the keys' queue that only the server's admin credentials
may push, so the writer's second check (``store/write/attribution.py``) is as narrow as
the server's first. The text is URL-safe base64 of a small JSON object.
"""

from __future__ import annotations

import base64
from collections.abc import Collection

import orjson

MAX_NAMES = 32
"""Most users (or agents) one delegated token may name: its narrowing rides on each event."""


def encode(users: Collection[str] | None, agents: Collection[str] | None,
           rights: Collection[str]) -> str:
    body = orjson.dumps({"u": None if users is None else sorted(users),
                         "a": None if agents is None else sorted(agents),
                         "r": sorted(rights)})
    return base64.urlsafe_b64encode(body).decode().rstrip("=")


def decode(text: str) -> tuple[set[str] | None, set[str] | None, set[str]]:
    """(users, agents, rights) of a narrowing; ValueError if it is not one."""
    try:
        data = orjson.loads(base64.urlsafe_b64decode(text + "=" * (-len(text) % 4)))
        users, agents, rights = data["u"], data["a"], data["r"]
    except (ValueError, TypeError, KeyError) as exc:
        raise ValueError(f"not a narrowing: {exc}") from None
    for names in (users, agents, rights):
        if names is not None and not (isinstance(names, list)
                                      and all(isinstance(n, str) for n in names)):
            raise ValueError("not a narrowing: its names must be lists of text")
    if rights is None:
        raise ValueError("not a narrowing: it names no rights")
    return (None if users is None else set(users), None if agents is None else set(agents),
            set(rights))
