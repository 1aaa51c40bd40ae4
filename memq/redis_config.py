"""``[redis]``: where Redis is when Sentinel manages it, and how ``memq up``'s private Redis
syncs its append-only file. Part of :mod:`memq.config` (a module of its own for size)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from memq.errors import ConfigError

FSYNC_POLICIES = ("everysec", "always")
"""``[redis] fsync``: Redis' ``appendfsync`` for ``memq up``'s private Redis."""


@dataclass(frozen=True)
class RedisConfig:
    """Where Redis is when Sentinel manages it, and how the private Redis syncs its log.

    With ``sentinels`` set, the role's URL (``redis_url``, or the role's URL file) still
    gives the credentials, the database number and TLS; the sentinels say which server is
    the master of ``service`` now, and every connection asks them again after a failover.
    """

    sentinels: tuple[str, ...] = ()
    """``"host:port"`` of each sentinel (``MEMQ_REDIS_SENTINELS``, comma-separated)."""
    service: str = "mymaster"
    """The master's name in the sentinels' configuration (``MEMQ_REDIS_SERVICE``)."""
    sentinel_username: str = ""
    sentinel_password: str = field(default="", repr=False)
    """For sentinels that require a password (``MEMQ_REDIS_SENTINEL_PASSWORD``)."""
    fsync: str = "everysec"
    """``always``: the private Redis syncs every append to disk before acknowledging it (no
    acknowledged append lost to a power cut); ``everysec`` may lose the last second."""

    def __post_init__(self) -> None:
        for address in self.sentinels:
            sentinel_address(address)
        if not self.service.strip():
            raise ConfigError("[redis] service must not be empty")
        if self.fsync not in FSYNC_POLICIES:
            raise ConfigError(f"[redis] fsync must be one of {', '.join(FSYNC_POLICIES)}, "
                              f"got {self.fsync!r:.60}")

    def sentinel_addresses(self) -> list[tuple[str, int]]:
        return [sentinel_address(address) for address in self.sentinels]


def sentinel_address(address: str) -> tuple[str, int]:
    """``"host:port"`` (``"[::1]:26379"`` for IPv6) as a pair; a clear error otherwise."""
    host, colon, port = address.strip().rpartition(":")
    host = host.strip("[]")
    if not (colon and host and port.isascii() and port.isdigit() and 0 < int(port) < 65536):
        raise ConfigError(f"[redis] sentinels: {address!r:.80} is not 'host:port'")
    return host, int(port)


def redis_env(env: dict[str, str]) -> dict[str, Any]:
    """``[redis]`` settings the environment gives (empty: not given)."""
    sentinels = env.get("MEMQ_REDIS_SENTINELS", "")
    return {
        "sentinels": tuple(a.strip() for a in sentinels.split(",") if a.strip()),
        "service": env.get("MEMQ_REDIS_SERVICE", ""),
        "sentinel_password": env.get("MEMQ_REDIS_SENTINEL_PASSWORD", ""),
    }
