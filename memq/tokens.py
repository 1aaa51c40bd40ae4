"""The bearer tokens of ``memq serve``: ``agent.token`` and ``admin.token``.

Each is a random secret in a 0600 file beside the database, made by the first
``memq serve`` that finds it missing (created exclusively: two servers starting together
end up with the same token). A request's token is compared with both in constant time,
and the one it matches says which role's Redis credentials the server acts with.
"""

from __future__ import annotations

import hmac
import os
import secrets
from dataclasses import dataclass
from pathlib import Path

from memq.authority import Role
from memq.errors import ConfigError

SERVED_ROLES = (Role.AGENT, Role.ADMIN)
"""The roles a token can stand for (a worker talks to Redis, never to the server)."""

TOKEN_FILE = "{role}.token"


def token_path(directory: Path, role: Role) -> Path:
    return directory / TOKEN_FILE.format(role=role.value)


def ensure_token(directory: Path, role: Role) -> str:
    """``role``'s token in ``directory``, written (0600) when missing (:func:`ensure_secret`)."""
    return ensure_secret(token_path(directory, role))


def ensure_secret(path: Path) -> str:
    """The secret in ``path``, written (0600) when missing.

    Written whole to a private temporary file, then linked to its name, which fails if the
    name exists: a server starting beside another one reads the other's secret, never a
    half-written file."""
    if path.exists():
        return read_token(path)
    token = secrets.token_urlsafe(32)
    draft = path.with_name(f".{path.name}.{secrets.token_hex(8)}")
    try:
        fd = os.open(draft, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        with os.fdopen(fd, "w") as fh:
            fh.write(token + "\n")
        os.link(draft, path)
    except FileExistsError:
        return read_token(path)
    except OSError as exc:
        raise ConfigError(f"cannot write {path}: {exc.strerror}") from None
    finally:
        draft.unlink(missing_ok=True)
    return token


def read_token(path: Path) -> str:
    try:
        token = path.read_text().strip()
    except (OSError, UnicodeDecodeError) as exc:
        raise ConfigError(f"cannot read {path}: {exc}") from None
    if len(token) < 16:
        raise ConfigError(f"{path} holds no usable token (16 characters at least); "
                          "delete it and a new one is made")
    return token


@dataclass(frozen=True)
class Tokens:
    """Which role each token stands for."""

    by_role: dict[Role, str]

    @classmethod
    def in_directory(cls, directory: Path) -> Tokens:
        return cls({role: ensure_token(directory, role) for role in SERVED_ROLES})

    def role_of(self, presented: str) -> Role | None:
        """The role of a presented token, or None; every token is compared, in constant
        time, so the answer's timing says nothing of which one nearly matched."""
        given = presented.encode("utf-8", "replace")
        found = None
        for role, token in self.by_role.items():
            if hmac.compare_digest(given, token.encode()):
                found = role
        return found
