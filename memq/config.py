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

from memq.approvals import normalize_prefix
from memq.errors import ConfigError, ValidationError
from memq.redis_config import RedisConfig, redis_env
from memq.schedule import validate_timezone

DEFAULT_REDIS_URL = "redis://127.0.0.1:6379/0"
"""Where Redis is when nothing else says."""

DEFAULT_DB_PATH = "data/memq.db"
"""The SQLite file, relative to the working directory."""

MAX_JOB_TIMEOUT_S = 24 * 3600
"""The longest any memq job may run: a job's own timeout is clamped to it when a worker
reads the job (:class:`memq.jobs.JSONJob`), and ``[consolidation] job_timeout_s`` may not
ask for more."""

DEFAULT_MODEL_NAME = "sentence-transformers/all-MiniLM-L6-v2"
"""The embedding model every vector in one database comes from."""

DEFAULT_MODEL_DIR = "models/all-MiniLM-L6-v2"
"""Where ``memq fetch-model`` assembles the model files (relative: the working directory)."""

ROLE_URL_FILE = "{role}.url"
"""Each role's Redis URL, credentials included, written (0600) into the data directory by
``memq up`` and ``memq acl apply``: ``agent.url``, ``worker.url``, ``admin.url``."""


@dataclass(frozen=True)
class WriterConfig:
    batch_size: int = 1000
    block_ms: int = 200
    reconcile_interval_s: float = 60.0
    stale_after_s: float = 60.0


@dataclass(frozen=True)
class LimitsConfig:
    max_content_bytes: int = 64 * 1024
    max_payload_bytes: int = 1024 * 1024
    max_session_id_chars: int = 200
    key_units_per_s: int = 500
    """What one API key may spend each second, on every server together: a read costs 1,
    a write 1 per event it sends (a batch of 100 turns, 100). A key may set its own."""
    key_concurrent: int = 16
    """Calls one API key may have running at once, on every server together."""


@dataclass(frozen=True)
class ClientConfig:
    """How a ``MemoryClient`` rides out a Redis restart."""

    retry_for_s: float = 5.0
    """How long a send (or a flush's poll, or a worker's send of its results) retries a
    refused or dropped Redis connection, with backoff, before raising BrokerError; 0 fails
    at the first refusal."""

    wait_replicas: int = 0
    """After each send, wait until this many replicas have the entries (Redis WAIT) before
    returning: 1 makes an acknowledged append survive a Sentinel failover; 0 acknowledges
    once the master has it (replication is asynchronous: a failover may lose the last ones)."""
    wait_timeout_s: float = 1.0
    """How long a send waits for ``wait_replicas``; fewer confirmations in time and the send
    is made again, until ``retry_for_s`` runs out: then :class:`~memq.errors.BrokerError`
    (the entries reached the master, they may not survive)."""

    def __post_init__(self) -> None:
        if not 0.0 <= self.retry_for_s <= 3600.0:
            raise ConfigError(
                f"[client] retry_for_s must be between 0 and 3600, got {self.retry_for_s}")
        _between("client", "wait_replicas", self.wait_replicas, 0, 100)
        _between("client", "wait_timeout_s", self.wait_timeout_s, 0.001, 3600.0)




@dataclass(frozen=True)
class MemoryConfig:
    working_memory_cap: int = 50
    max_sessions: int = 1000

    def __post_init__(self) -> None:
        _at_least("memory", "working_memory_cap", self.working_memory_cap, 1)
        _at_least("memory", "max_sessions", self.max_sessions, 1)


@dataclass(frozen=True)
class RetrievalConfig:
    profile: str = "recall"
    recency_limit: int = 10
    importance_threshold: float = 0.8
    importance_limit: int = 5
    semantic_threshold: float = 0.65
    semantic_limit: int = 5
    include_facts: bool = False
    facts_limit: int = 5
    query_cache_size: int = 256
    vector_cache_max_vectors: int = 200_000
    # The `recall` profile (see producers/ranking/fusion.py for what each one means).
    recall_budget: int = 30
    """Items ``get_context`` returns at most: the recent window, the important turns, then
    relevance from beyond them (20 with the defaults)."""
    recall_recency_limit: int = 10
    """The session's last turns, always returned, with or without a query: an agent that
    asks for its context before answering must not lose what was said three turns ago."""
    recall_importance_limit: int = 2
    recall_candidates: int = 50
    recall_lexical_weight: float = 0.5
    recall_min_z: float = 0.5
    recall_neighbour_share: float = 0.7
    recall_context_weight: float = 0.5
    recall_feedback: float = 1.0
    recall_feedback_turns: int = 2
    reranker_dir: str = ""
    """A local cross-encoder (see memq/reranker.py); empty: none (the default)."""
    reranker_candidates: int = 40

    def __post_init__(self) -> None:
        for key in ("recency_limit", "importance_limit", "semantic_limit",
                    "recall_recency_limit", "recall_importance_limit"):
            _at_least("retrieval", key, getattr(self, key), 0)
        _at_least("retrieval", "recall_budget", self.recall_budget, 1)
        _at_least("retrieval", "recall_candidates", self.recall_candidates, 1)
        _between("retrieval", "recall_lexical_weight", self.recall_lexical_weight, 0.0, 1.0)
        _between("retrieval", "recall_neighbour_share", self.recall_neighbour_share, 0.0, 1.0)
        _between("retrieval", "recall_min_z", self.recall_min_z, -10.0, 10.0)
        _between("retrieval", "recall_context_weight", self.recall_context_weight, 0.0, 1.0)
        _between("retrieval", "recall_feedback", self.recall_feedback, 0.0, 10.0)
        _at_least("retrieval", "recall_feedback_turns", self.recall_feedback_turns, 1)
        _at_least("retrieval", "reranker_candidates", self.reranker_candidates, 1)
        _at_least("retrieval", "facts_limit", self.facts_limit, 1)
        _at_least("retrieval", "query_cache_size", self.query_cache_size, 1)
        _at_least("retrieval", "vector_cache_max_vectors", self.vector_cache_max_vectors, 1)
        _between("retrieval", "importance_threshold", self.importance_threshold, 0.0, 1.0)
        _between("retrieval", "semantic_threshold", self.semantic_threshold, -1.0, 1.0)


DEFAULT_MAX_TOKENS = 256
"""Word pieces of a text the model reads, [CLS] and [SEP] included: the limit
sentence-transformers sets for all-MiniLM-L6-v2 (``max_seq_length``; its sentence training
saw at most 128). The rest of a longer text is not embedded (its words stay searchable by
the lexical index)."""


@dataclass(frozen=True)
class EmbedConfig:
    model_name: str = DEFAULT_MODEL_NAME
    model_dir: str = DEFAULT_MODEL_DIR
    dim: int = 384
    batch_size: int = 64
    """At most this many texts per model batch."""
    batch_tokens: int = 256
    """At most this many tokens per model batch, padding included (a longer text alone).
    Measured with one thread on the agent mix: 128-384 equally fast, 2048 a fifth slower
    (large batches of long texts leave the CPU's caches)."""
    max_tokens: int = DEFAULT_MAX_TOKENS
    threads: int = 1
    """onnxruntime threads per worker process (and the tokenizer runs on one when it is 1)."""
    workers: int = 0
    """Embed workers ``memq up`` starts; 0 means one per core left after the writer."""
    max_retries: int = 3
    retry_backoff_s: float = 0.5
    job_batch_size: int = 64

    def __post_init__(self) -> None:
        _at_least("embed", "job_batch_size", self.job_batch_size, 1)
        _at_least("embed", "batch_size", self.batch_size, 1)
        _at_least("embed", "batch_tokens", self.batch_tokens, 1)
        _at_least("embed", "max_tokens", self.max_tokens, 2)  # [CLS] and [SEP]
        _at_least("embed", "threads", self.threads, 1)
        _at_least("embed", "workers", self.workers, 0)
        if self.max_retries < 0 or self.retry_backoff_s < 0:
            raise ConfigError("[embed] max_retries and retry_backoff_s must not be negative")


@dataclass(frozen=True)
class ConsolidationConfig:
    interval_hours: float = 6.0
    min_age_hours: float = 24.0
    chunk_size: int = 40
    summary_importance: float = 0.7
    chunk_chars: int = 16_000
    """Upper bound on the characters of one chunk (a single longer message is its own)."""
    min_chunk_chars: int = 400
    """A chunk with fewer characters is left for a later pass: too little to compress."""
    max_chunks_per_pass: int = 500
    """Bounds one pass's work; the next pass goes on where this one stopped."""
    target_ratio: float = 0.3
    """Share of the source characters the extractive summariser aims for."""
    job_timeout_s: int = 300

    def __post_init__(self) -> None:
        checks = {
            "interval_hours": self.interval_hours > 0,
            "min_age_hours": self.min_age_hours >= 0,
            "chunk_size": self.chunk_size >= 1,
            "summary_importance": 0.0 <= self.summary_importance <= 1.0,
            "chunk_chars": self.chunk_chars >= 1,
            "min_chunk_chars": self.min_chunk_chars >= 0,
            "max_chunks_per_pass": self.max_chunks_per_pass >= 1,
            "target_ratio": 0.0 < self.target_ratio < 1.0,
            "job_timeout_s": 1 <= self.job_timeout_s <= MAX_JOB_TIMEOUT_S,
        }
        bad = [name for name, ok in checks.items() if not ok]
        if bad:
            values = ", ".join(f"{name} = {getattr(self, name)!r}" for name in bad)
            raise ConfigError(f"[consolidation] value(s) out of range: {values}")


@dataclass(frozen=True)
class LLMConfig:
    base_url: str = ""
    model: str = ""
    api_key_env: str = "MEMQ_LLM_API_KEY"
    timeout_s: float = 30.0
    max_tokens: int = 1024


@dataclass(frozen=True)
class SchedulerConfig:
    tz: str = "UTC"
    handler: str = ""
    tasks: tuple[dict[str, Any], ...] = ()
    interval_s: float = 1.0
    agent_inbox_maxlen: int = 10_000
    """About how many deliveries ``memq:agent-inbox`` keeps (older ones are trimmed as new
    ones arrive; Redis trims in whole blocks, so a few more may stay); 0 keeps them all."""

    def __post_init__(self) -> None:
        _check_scheduler(self)


@dataclass(frozen=True)
class MacrosConfig:
    min_confidence: float = 0.5
    suggest_limit: int = 5

    def __post_init__(self) -> None:
        _between("macros", "min_confidence", self.min_confidence, 0.0, 1.0)
        _at_least("macros", "suggest_limit", self.suggest_limit, 1)


@dataclass(frozen=True)
class TerminalConfig:
    allowed_prefixes: tuple[str, ...] = ()

    def __post_init__(self) -> None:
        # A typo in an approval must fail at start, not silently approve nothing.
        for prefix in self.allowed_prefixes:
            try:
                normalize_prefix(prefix)
            except ValidationError as exc:
                raise ConfigError(f"[terminal] allowed_prefixes: {prefix!r}: {exc}") from None


@dataclass(frozen=True)
class OpsConfig:
    """Running the stack: ``memq up``'s supervisor, the dashboard and the metrics endpoint."""

    restart_backoff_s: float = 0.5
    restart_backoff_max_s: float = 30.0
    stop_timeout_s: float = 30.0
    drain_timeout_s: float = 10.0
    dashboard_host: str = "127.0.0.1"
    dashboard_port: int = 9181
    dashboard_allowed_hosts: tuple[str, ...] = ()
    """Host names the dashboard answers to, besides its address and the loopback names."""
    metrics_host: str = "127.0.0.1"
    metrics_port: int = 9464


@dataclass(frozen=True)
class ServeConfig:
    """``memq serve`` (``[serve]``)."""

    require_keys: bool = False
    """Refuse the shared ``agent.token``: every agent calls with a key of its own
    (``memq keys create``), which reaches only its grant. ``admin.token`` stays the
    person's."""


@dataclass(frozen=True)
class RetentionConfig:
    """How long messages, and the records of forgotten data, stay (``[retention]``);
    0 keeps them for good."""

    messages_days: float = 0.0
    """After this many days (by ``created_at``), a message is erased as a forget erases it;
    summaries are kept. Must exceed ``[consolidation] min_age_hours`` (in days), so a
    summary can be made first."""
    forgotten_days: float = 0.0
    """After this many days, a forget's own traces go: the event that asked for it (it
    names the session or the user), its tombstones, the ids of the messages it erased and
    its record in ``erasures``. A single message's forget keeps them, as retention does
    (a rebuild needs them). 0: kept for good."""
    tool_calls_days: float = 0.0
    """After this many days (by ``created_at``), a recorded tool call's arguments are
    erased and the macros are learned again from the calls left. Each pass that erases
    some replays every recorded call in the writer's transaction (bench/facts_macros.py
    measures it), so it is a setting of its own. 0: kept for good."""
    interval_hours: float = 1.0
    """How often the writer looks for records past their time."""

    def __post_init__(self) -> None:
        days = (self.messages_days, self.forgotten_days, self.tool_calls_days)
        if not (all(0.0 <= d <= 365_000 for d in days) and 0.0 < self.interval_hours <= 8760):
            raise ConfigError(
                f"[retention] value(s) out of range: messages_days = {self.messages_days!r}, "
                f"forgotten_days = {self.forgotten_days!r}, tool_calls_days = "
                f"{self.tool_calls_days!r} (0 or more), interval_hours = "
                f"{self.interval_hours!r} (over 0, at most 8760)")


@dataclass(frozen=True)
class ReplicationConfig:
    """Litestream's replica of the database (memq/replication.py); none when ``url`` is empty."""

    url: str = ""
    """``file:///dir`` or an S3-compatible URL (``s3://bucket/path``)."""
    sync_interval_s: float = 1.0
    """How often Litestream ships new WAL pages: the most a lost disk can take."""
    keep_inbox_s: float = 600.0
    """With a replica, how long the writer keeps acknowledged inbox entries (trimmed by
    age): a database restored from a replica this far behind re-applies what it missed."""

    def __post_init__(self) -> None:
        _between("replication", "sync_interval_s", self.sync_interval_s, 0.1, 3600.0)
        _between("replication", "keep_inbox_s", self.keep_inbox_s, 0.0, 7 * 24 * 3600.0)
        if self.url and self.keep_inbox_s < 10 * self.sync_interval_s:
            raise ConfigError(
                f"[replication] keep_inbox_s ({self.keep_inbox_s:g}) must be at least ten "
                f"sync intervals ({10 * self.sync_interval_s:g} s): the inbox must outlast "
                "the replica's lag")

    @property
    def inbox_retention_s(self) -> float:
        """How long acknowledged inbox entries stay: only a replica needs them."""
        return self.keep_inbox_s if self.url else 0.0


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


TASK_KEYS: dict[str, type] = {
    "name": str, "schedule": str, "prompt": str, "oneshot": bool, "trusted": bool, "tz": str,
}
"""Keys of a ``[[scheduler.tasks]]`` entry and their types; the first three are required."""


def _check_scheduler(section: SchedulerConfig) -> None:
    """Shape checks only: schedules are parsed at writer start, against the clock then."""
    _check_tz("[scheduler] tz", section.tz)
    module, colon, function = section.handler.partition(":")
    if section.handler and not (colon and module.strip() and function.strip()):
        raise ConfigError(
            f"[scheduler] handler must be 'module:function', got {section.handler!r}")
    if not section.interval_s > 0:
        raise ConfigError(f"[scheduler] interval_s must be positive, got {section.interval_s}")
    if section.agent_inbox_maxlen < 0:
        raise ConfigError("[scheduler] agent_inbox_maxlen must be 0 (keep all) or more, "
                          f"got {section.agent_inbox_maxlen}")
    names: set[str] = set()
    for number, entry in enumerate(section.tasks, 1):
        where = _check_task_entry(number, entry)
        if entry["name"] in names:
            raise ConfigError(f"{where}: duplicate name; task names must be unique")
        names.add(entry["name"])


def _check_task_entry(number: int, entry: Any) -> str:
    where = f"[[scheduler.tasks]] entry {number}"
    if not isinstance(entry, dict):
        raise ConfigError(f"{where} must be a table, got {entry!r:.60}")
    if isinstance(entry.get("name"), str) and entry["name"].strip():
        where += f" ({entry['name']!r})"
    unknown = sorted(set(entry) - set(TASK_KEYS))
    if unknown:
        raise ConfigError(f"{where}: unknown key(s) {', '.join(unknown)}; "
                          f"known: {', '.join(TASK_KEYS)}")
    for key in ("name", "schedule", "prompt"):
        if key not in entry:
            raise ConfigError(f"{where}: missing key {key!r}")
    for key, kind in TASK_KEYS.items():
        value = entry.get(key)
        if key in entry and not isinstance(value, kind):
            raise ConfigError(f"{where}: {key} must be {kind.__name__}, got {value!r:.60}")
        if kind is str and key in entry and not str(value).strip():
            raise ConfigError(f"{where}: {key} must not be empty")
    if "tz" in entry:
        _check_tz(f"{where}: tz", entry["tz"])
    return where


def _check_tz(where: str, tz: str) -> None:
    try:
        validate_timezone(tz)
    except ValueError as exc:
        raise ConfigError(f"{where}: {exc}") from None


_T = TypeVar("_T")


def _at_least(section: str, key: str, value: int, low: int) -> None:
    if value < low:
        raise ConfigError(f"[{section}] {key} must be at least {low}, got {value}")


def _between(section: str, key: str, value: float, low: float, high: float) -> None:
    # "not low <= value <= high" also catches NaN, which every comparison rejects.
    if not low <= value <= high:
        raise ConfigError(f"[{section}] {key} must be between {low} and {high}, got {value}")


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
