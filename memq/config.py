"""Settings: ``memq.toml`` (path in ``MEMQ_CONFIG``) overlaid by the environment.

Every key has a default, so an empty file (or none) is a working configuration. Unknown
sections and keys are an error that names them, and the file: a typo must not silently
fall back to a default. The environment wins over the file for ``MEMQ_REDIS_URL``,
``MEMQ_DB``, ``MEMQ_EMBED_MODEL_DIR`` and ``MEMQ_REDIS_SENTINELS`` / ``MEMQ_REDIS_SERVICE`` /
``MEMQ_REDIS_SENTINEL_PASSWORD`` (``[redis]``); a command's own options win over both.

:func:`load` settles two things once, so every process that loads the same settings
agrees, wherever it was started from:

* the model directory becomes absolute: a relative ``[embed] model_dir`` is read from the
  configuration file's directory, a relative default or ``MEMQ_EMBED_MODEL_DIR`` from the
  working directory;
* with no Redis URL set anywhere, the Redis of the database's directory is found through
  the URL files ``memq up`` (or ``memq acl apply``) writes there, one per role with its
  credentials (``agent.url``, ``worker.url``, ``admin.url``, see :mod:`memq.acl`): the CLI
  reads the admin's, ``memq worker`` the worker's, ``MemoryClient.from_env()`` the agent's.
"""

from __future__ import annotations

import dataclasses
import logging
import os
import tomllib
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeVar

from memq.config_sections import (
    DEFAULT_MAX_TOKENS,
    DEFAULT_MODEL_DIR,
    DEFAULT_MODEL_NAME,
    MAX_JOB_TIMEOUT_S,
    ClientConfig,
    ConsolidationConfig,
    EmbedConfig,
    LimitsConfig,
    LLMConfig,
    MacrosConfig,
    MemoryConfig,
    OpsConfig,
    ReplicationConfig,
    RetentionConfig,
    RetrievalConfig,
    SchedulerConfig,
    ServeConfig,
    TerminalConfig,
    WriterConfig,
)
from memq.errors import ConfigError
from memq.redis_config import RedisConfig, redis_env

__all__ = [  # the sections are defined in memq.config_sections, found here
    "DEFAULT_DB_PATH",
    "DEFAULT_MAX_TOKENS",
    "DEFAULT_MODEL_DIR",
    "DEFAULT_MODEL_NAME",
    "DEFAULT_REDIS_URL",
    "MAX_JOB_TIMEOUT_S",
    "ROLE_URL_FILE",
    "ClientConfig",
    "Config",
    "ConsolidationConfig",
    "EmbedConfig",
    "LLMConfig",
    "LimitsConfig",
    "MacrosConfig",
    "MemoryConfig",
    "OpsConfig",
    "ReplicationConfig",
    "RetentionConfig",
    "RetrievalConfig",
    "SchedulerConfig",
    "ServeConfig",
    "TerminalConfig",
    "WriterConfig",
    "apply_env",
    "from_mapping",
    "load",
    "private_redis_url",
    "say_default",
]

DEFAULT_REDIS_URL = "redis://127.0.0.1:6379/0"
"""Where Redis is when nothing else says."""

DEFAULT_DB_PATH = "data/memq.db"
"""The SQLite file, relative to the working directory."""

ROLE_URL_FILE = "{role}.url"
"""Each role's Redis URL, credentials included, written (0600) into the data directory by
``memq up`` and ``memq acl apply``: ``agent.url``, ``worker.url``, ``admin.url``."""


@dataclass(frozen=True)
class Config:
    redis_url: str = DEFAULT_REDIS_URL
    db_path: str = DEFAULT_DB_PATH
    writer: WriterConfig = field(default_factory=WriterConfig)
    limits: LimitsConfig = field(default_factory=LimitsConfig)
    memory: MemoryConfig = field(default_factory=MemoryConfig)
    retrieval: RetrievalConfig = field(default_factory=RetrievalConfig)
    embed: EmbedConfig = field(default_factory=EmbedConfig)
    consolidation: ConsolidationConfig = field(default_factory=ConsolidationConfig)
    llm: LLMConfig = field(default_factory=LLMConfig)
    scheduler: SchedulerConfig = field(default_factory=SchedulerConfig)
    terminal: TerminalConfig = field(default_factory=TerminalConfig)
    ops: OpsConfig = field(default_factory=OpsConfig)
    macros: MacrosConfig = field(default_factory=MacrosConfig)
    client: ClientConfig = field(default_factory=ClientConfig)
    replication: ReplicationConfig = field(default_factory=ReplicationConfig)
    retention: RetentionConfig = field(default_factory=RetentionConfig)
    redis: RedisConfig = field(default_factory=RedisConfig)
    serve: ServeConfig = field(default_factory=ServeConfig)

    def __post_init__(self) -> None:
        days = self.retention.messages_days
        if days and days * 24 <= self.consolidation.min_age_hours:
            raise ConfigError(
                f"[retention] messages_days = {days:g} erases messages before consolidation "
                f"may summarise them ([consolidation] min_age_hours = "
                f"{self.consolidation.min_age_hours:g}): give more days, or fewer hours")

    def replace(self, **changes: Any) -> Config:
        return dataclasses.replace(self, **changes)


_T = TypeVar("_T")


def _coerce(section: str, key: str, value: Any, default: Any) -> Any:
    """Check a file value against the type of its default; ints are accepted for floats."""
    if isinstance(default, bool):
        ok = isinstance(value, bool)
    elif isinstance(default, float):
        ok = isinstance(value, (int, float)) and not isinstance(value, bool)
        value = float(value) if ok else value
    elif isinstance(default, tuple):
        ok = isinstance(value, list)
        value = tuple(value) if ok else value
    else:
        ok = isinstance(value, type(default)) and not isinstance(value, bool)
    if not ok:
        raise ConfigError(
            f"[{section}] {key} must be {type(default).__name__}, got {value!r}"
        )
    return value


def _section(cls: type[_T], name: str, raw: Any) -> _T:
    if not isinstance(raw, dict):
        raise ConfigError(f"[{name}] must be a table")
    defaults = cls()
    known = {f.name for f in dataclasses.fields(cls)}  # type: ignore[arg-type]
    unknown = sorted(set(raw) - known)
    if unknown:
        raise ConfigError(f"unknown key(s) in [{name}]: {', '.join(unknown)}")
    values = {k: _coerce(name, k, v, getattr(defaults, k)) for k, v in raw.items()}
    return cls(**values)


_SECTIONS: dict[str, type[Any]] = {
    "writer": WriterConfig,
    "limits": LimitsConfig,
    "memory": MemoryConfig,
    "retrieval": RetrievalConfig,
    "embed": EmbedConfig,
    "consolidation": ConsolidationConfig,
    "llm": LLMConfig,
    "scheduler": SchedulerConfig,
    "terminal": TerminalConfig,
    "ops": OpsConfig,
    "macros": MacrosConfig,
    "client": ClientConfig,
    "replication": ReplicationConfig,
    "retention": RetentionConfig,
    "redis": RedisConfig,
    "serve": ServeConfig,
}


def from_mapping(data: dict[str, Any]) -> Config:
    """Build a :class:`Config` from parsed TOML, rejecting unknown sections and keys."""
    top = {k: v for k, v in data.items() if k not in _SECTIONS}
    unknown = sorted(set(top) - {"redis_url", "db_path"})
    if unknown:
        raise ConfigError(f"unknown top-level key(s): {', '.join(unknown)}")
    values: dict[str, Any] = {
        k: _coerce("top", k, v, getattr(Config, k)) for k, v in top.items()
    }
    for name, cls in _SECTIONS.items():
        if name in data:
            values[name] = _section(cls, name, data[name])
    return Config(**values)


def load(
    path: str | os.PathLike[str] | None = None,
    env: dict[str, str] | None = None,
    *,
    db_path: str | None = None,
    redis_url: str | None = None,
    discover_redis: bool = True,
    role: str = "admin",
) -> Config:
    """Read the configuration file (if any), apply the environment, then the explicit
    ``db_path`` / ``redis_url`` (a command's options); see the module for what is settled.
    ``role`` is whose URL file is read when no Redis URL is set (agent, worker, admin)."""
    env = dict(os.environ) if env is None else env
    path = path or env.get("MEMQ_CONFIG") or ("memq.toml" if Path("memq.toml").is_file() else None)
    data = _read_toml(Path(path)) if path else {}
    try:
        config = from_mapping(data)
    except ConfigError as exc:
        raise ConfigError(f"{Path(path).resolve() if path else 'memq.toml'}: {exc}") from None
    config = apply_env(config, env)
    config = config.replace(db_path=db_path or config.db_path,
                            redis_url=redis_url or config.redis_url)
    config = _absolute_model_dir(config, Path(path).resolve().parent if path else None,
                                 from_file="model_dir" in data.get("embed", {})
                                 and not env.get("MEMQ_EMBED_MODEL_DIR"))
    configured = redis_url or env.get("MEMQ_REDIS_URL") or "redis_url" in data
    if discover_redis and not configured:
        found = private_redis_url(config.db_path, role)
        if found is None:
            DEFAULTED[config.redis_url] = config.db_path
        config = config.replace(redis_url=found or config.redis_url)
    return config


DEFAULTED: dict[str, str] = {}
"""Redis URLs :func:`load` fell back to (with the database it was loading for): the first
connection to one says which Redis was chosen and why (:func:`memq.broker.client_for`),
since the default may be another service's Redis, not memq's."""


_SAID: set[str] = set()


def say_default(url: str) -> None:
    """Once per process and URL, if :func:`load` chose ``url`` for want of any other."""
    db_path = DEFAULTED.get(url)
    if db_path is not None and url not in _SAID:
        _SAID.add(url)
        logging.getLogger("memq.config").warning(
            "no Redis configured (no MEMQ_REDIS_URL, no redis_url in memq.toml, no `memq up` "
            "data directory beside %s): using %s", db_path, url)


def _absolute_model_dir(config: Config, file_dir: Path | None, *, from_file: bool) -> Config:
    base = file_dir if from_file and file_dir is not None else Path.cwd()
    model_dir = os.path.abspath(base / config.embed.model_dir)  # keeps symlinked paths
    return config.replace(embed=dataclasses.replace(config.embed, model_dir=model_dir))


def private_redis_url(db_path: str | os.PathLike[str], role: str = "admin") -> str | None:
    """``role``'s URL to the Redis of ``db_path``'s directory, if one was written there."""
    try:
        url_file = Path(db_path).resolve().parent / ROLE_URL_FILE.format(role=role)
        return url_file.read_text().strip() or None
    except (OSError, ValueError, UnicodeDecodeError):  # none there, or a path refused later
        return None


def apply_env(config: Config, env: dict[str, str]) -> Config:
    changes: dict[str, Any] = {}
    if env.get("MEMQ_REDIS_URL"):
        changes["redis_url"] = env["MEMQ_REDIS_URL"]
    if env.get("MEMQ_DB"):
        changes["db_path"] = env["MEMQ_DB"]
    if env.get("MEMQ_EMBED_MODEL_DIR"):
        changes["embed"] = dataclasses.replace(config.embed, model_dir=env["MEMQ_EMBED_MODEL_DIR"])
    redis_changes = {key: value for key, value in redis_env(env).items() if value}
    if redis_changes:
        changes["redis"] = dataclasses.replace(config.redis, **redis_changes)
    return config.replace(**changes)




def _read_toml(path: Path) -> dict[str, Any]:
    try:
        with path.open("rb") as fh:
            return tomllib.load(fh)
    except FileNotFoundError as exc:
        raise ConfigError(f"configuration file not found: {path}") from exc
    except OSError as exc:  # a directory, no permission...
        raise ConfigError(f"cannot read the configuration file {path}: {exc.strerror}") from exc
    except tomllib.TOMLDecodeError as exc:
        raise ConfigError(f"{path} is not valid TOML: {exc}") from exc
    except UnicodeDecodeError as exc:
        raise ConfigError(f"{path} is not valid TOML: it is not UTF-8 text ({exc})") from exc
    except ValueError as exc:  # tomllib's int(): a number past Python's 4,300-digit limit
        raise ConfigError(f"{path} holds a number too long to read: {exc}") from exc
