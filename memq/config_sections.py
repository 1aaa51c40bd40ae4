"""The sections of ``memq.toml``: one frozen dataclass each, with its defaults and the
checks of its values (a bad value is a :class:`~memq.errors.ConfigError` that names the
section and key). How a file and the environment become a :class:`~memq.config.Config`
is :mod:`memq.config`'s; the sections are re-exported there.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from memq.approvals import normalize_prefix
from memq.errors import ConfigError, ValidationError
from memq.schedule import validate_timezone

MAX_JOB_TIMEOUT_S = 24 * 3600
"""The longest any memq job may run: a job's own timeout is clamped to it when a worker
reads the job (:class:`memq.jobs.JSONJob`), and ``[consolidation] job_timeout_s`` may not
ask for more."""

DEFAULT_MODEL_NAME = "sentence-transformers/all-MiniLM-L6-v2"
"""The embedding model every vector in one database comes from."""

DEFAULT_MODEL_DIR = "models/all-MiniLM-L6-v2"
"""Where ``memq fetch-model`` assembles the model files (relative: the working directory)."""


@dataclass(frozen=True)
class WriterConfig:
    batch_size: int = 1000
    block_ms: int = 200
    reconcile_interval_s: float = 60.0
    stale_after_s: float = 60.0

    def __post_init__(self) -> None:
        # Redis reads a block of 0 ms as "wait forever": the writer would never stop.
        _between("writer", "batch_size", self.batch_size, 1, 100_000)
        _between("writer", "block_ms", self.block_ms, 1, 60_000)
        _between("writer", "reconcile_interval_s", self.reconcile_interval_s, 0.01, 86_400.0)
        _between("writer", "stale_after_s", self.stale_after_s, 0.0, 86_400.0)


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
    key_queued: int = 256
    """Events of one API key waiting in the keys' queue for the writer, at most: past it
    the key's writes are refused (429) until the writer has taken some in."""

    def __post_init__(self) -> None:
        _at_least("limits", "max_content_bytes", self.max_content_bytes, 1)
        _at_least("limits", "max_payload_bytes", self.max_payload_bytes, 1)
        _between("limits", "max_session_id_chars", self.max_session_id_chars, 1, 10_000)
        _between("limits", "key_units_per_s", self.key_units_per_s, 1, 10**9)
        _between("limits", "key_concurrent", self.key_concurrent, 1, 100_000)
        _between("limits", "key_queued", self.key_queued, 1, 10**6)


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
        # Bounded above too: the cap reaches SQLite's LIMIT, which takes 64 bits at most.
        _between("memory", "working_memory_cap", self.working_memory_cap, 1, 1_000_000)
        _between("memory", "max_sessions", self.max_sessions, 1, 100_000_000)


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
    recall_duplicate_cosine: float = 0.99
    """A relevant turn this close (cosine) to a better one already chosen is left out: a
    near-copy (a retried call, a repeated tool output, the same words to someone else)
    takes one place, not several. 1.0: only exact copies."""
    recall_name_penalty: float = 0.7
    """When a question names someone some sessions of the scope name too, the share of its
    score a relevant turn of another session loses. 0: no such rule (nor rule 7)."""
    recall_named_turns: int = 2000
    """With a name penalty, how many turns of the sessions that name whom a question names
    are also searched as a scope of their own, the names left out of the lexical search
    (rule 7 of producers/ranking/fusion.py). 0: none."""
    reranker_dir: str = ""
    """A local cross-encoder (see memq/reranker.py); empty: none (the default)."""
    reranker_candidates: int = 40

    def __post_init__(self) -> None:
        for key in ("recency_limit", "importance_limit", "semantic_limit",
                    "recall_recency_limit", "recall_importance_limit", "recall_named_turns"):
            _at_least("retrieval", key, getattr(self, key), 0)
        _at_least("retrieval", "recall_budget", self.recall_budget, 1)
        _at_least("retrieval", "recall_candidates", self.recall_candidates, 1)
        _between("retrieval", "recall_lexical_weight", self.recall_lexical_weight, 0.0, 1.0)
        _between("retrieval", "recall_neighbour_share", self.recall_neighbour_share, 0.0, 1.0)
        _between("retrieval", "recall_min_z", self.recall_min_z, -10.0, 10.0)
        _between("retrieval", "recall_context_weight", self.recall_context_weight, 0.0, 1.0)
        _between("retrieval", "recall_feedback", self.recall_feedback, 0.0, 10.0)
        _at_least("retrieval", "recall_feedback_turns", self.recall_feedback_turns, 1)
        _between("retrieval", "recall_duplicate_cosine", self.recall_duplicate_cosine,
                 0.5, 1.0)
        _between("retrieval", "recall_name_penalty", self.recall_name_penalty, 0.0, 1.0)
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

    def __post_init__(self) -> None:
        # A port past 65535 is not refused by every socket layer: 70000 once became 4464.
        _between("ops", "dashboard_port", self.dashboard_port, 0, 65_535)
        _between("ops", "metrics_port", self.metrics_port, 0, 65_535)


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


def _at_least(section: str, key: str, value: int, low: int) -> None:
    if value < low:
        raise ConfigError(f"[{section}] {key} must be at least {low}, got {value}")


def _between(section: str, key: str, value: float, low: float, high: float) -> None:
    # "not low <= value <= high" also catches NaN, which every comparison rejects.
    if not low <= value <= high:
        raise ConfigError(f"[{section}] {key} must be between {low} and {high}, got {value}")
