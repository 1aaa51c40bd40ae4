"""Configuration: defaults, the file, the environment winning, and clear errors."""

from __future__ import annotations

from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from memq import config
from memq.errors import ConfigError


def write(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "memq.toml"
    path.write_text(text)
    return path


def test_defaults_without_a_file(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    cfg = config.load(env={})
    assert cfg.redis_url == config.DEFAULT_REDIS_URL
    assert cfg.memory.working_memory_cap == 50
    assert (cfg.retrieval.recency_limit, cfg.retrieval.importance_threshold,
            cfg.retrieval.semantic_threshold) == (10, 0.8, 0.65)
    assert cfg.consolidation.interval_hours == 6.0


def test_the_default_redis_is_named_with_why(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    """The default may be another service's Redis: say which was chosen, once, when it is
    first connected to (a command that never reaches Redis says nothing)."""
    from memq import broker

    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(config, "DEFAULTED", {})
    monkeypatch.setattr(config, "_SAID", set())
    for _ in range(2):
        broker.client_for(config.load(env={}))
    said = [r.getMessage() for r in caplog.records if r.name == "memq.config"]
    assert said == [f"no Redis configured (no MEMQ_REDIS_URL, no redis_url in memq.toml, no "
                    f"`memq up` data directory beside data/memq.db): using "
                    f"{config.DEFAULT_REDIS_URL}"]
    broker.client_for(config.load(env={"MEMQ_REDIS_URL": "redis://elsewhere:6379/0"}))
    assert len([r for r in caplog.records if r.name == "memq.config"]) == 1


def test_file_values_and_env_override(tmp_path: Path) -> None:
    path = write(tmp_path, 'db_path = "x.db"\nredis_url = "redis://file"\n'
                           '[retrieval]\nsemantic_threshold = 0.5\nrecency_limit = 3\n')
    cfg = config.load(path, env={"MEMQ_REDIS_URL": "redis://env", "MEMQ_EMBED_MODEL_DIR": "/m"})
    assert cfg.redis_url == "redis://env"
    assert cfg.db_path == "x.db"
    assert cfg.retrieval.semantic_threshold == 0.5
    assert cfg.retrieval.recency_limit == 3
    assert cfg.embed.model_dir == "/m"


def test_config_path_from_environment(tmp_path: Path) -> None:
    path = write(tmp_path, '[memory]\nworking_memory_cap = 7\n')
    assert config.load(env={"MEMQ_CONFIG": str(path)}).memory.working_memory_cap == 7


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("colour = 1\n", "unknown top-level key(s): colour"),
        ("[retrieval]\nsemantic_treshold = 0.5\n", "unknown key(s) in [retrieval]: "
                                                   "semantic_treshold"),
        ("[retrieval]\nrecency_limit = 'ten'\n", "[retrieval] recency_limit must be int"),
        ("[retrieval]\nrecency_limit = true\n", "[retrieval] recency_limit must be int"),
        ("[memory]\nworking_memory_cap = 1.5\n", "[memory] working_memory_cap must be int"),
        ("retrieval = 3\n", "[retrieval] must be a table"),
        ("[writer\n", "is not valid TOML"),
    ],
)
def test_bad_files_name_the_problem(tmp_path: Path, text: str, message: str) -> None:
    path = write(tmp_path, text)
    with pytest.raises(ConfigError) as info:
        config.load(path, env={})
    assert message in str(info.value)
    assert str(path) in str(info.value)  # the file actually read


BOUNDED = [("writer", "batch_size", 1, 100_000), ("writer", "block_ms", 1, 60_000),
           ("limits", "max_session_id_chars", 1, 10_000),
           ("limits", "key_concurrent", 1, 100_000),
           ("limits", "key_queued", 1, 1_000_000),
           ("memory", "working_memory_cap", 1, 1_000_000),
           ("ops", "dashboard_port", 0, 65_535), ("ops", "metrics_port", 0, 65_535)]
"""Settings a file once could set to anything: a batch of -5 crashed the writer, a port
of 70000 became 4464, a cap past 64 bits failed the first read."""


@settings(max_examples=60, deadline=None)
@given(setting=st.sampled_from(BOUNDED), value=st.integers(min_value=-(2**70),
                                                           max_value=2**70))
def test_a_bounded_setting_outside_its_range_is_refused_by_name(
    tmp_path_factory: pytest.TempPathFactory, setting: tuple[str, str, int, int], value: int
) -> None:
    section, key, low, high = setting
    path = write(tmp_path_factory.mktemp("cfg"), f"[{section}]\n{key} = {value}\n")
    if low <= value <= high:
        assert getattr(getattr(config.load(path, env={}), section), key) == value
        return
    with pytest.raises(ConfigError, match=rf"\[{section}\] {key} must be between {low}"):
        config.load(path, env={})


def test_missing_file_is_an_error(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="configuration file not found"):
        config.load(tmp_path / "nope.toml", env={})


def test_ints_are_accepted_for_floats(tmp_path: Path) -> None:
    cfg = config.load(write(tmp_path, "[retrieval]\nimportance_threshold = 1\n"), env={})
    assert cfg.retrieval.importance_threshold == 1.0
    assert isinstance(cfg.retrieval.importance_threshold, float)


def test_the_model_directory_is_made_absolute_once(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    monkeypatch.chdir(elsewhere)
    # The default and the environment are read from where the process starts...
    assert config.load(env={}).embed.model_dir == str(elsewhere / config.DEFAULT_MODEL_DIR)
    assert config.load(env={"MEMQ_EMBED_MODEL_DIR": "m"}).embed.model_dir == \
        str(elsewhere / "m")
    # ... a path in the file from the file's own directory, wherever memq is started.
    path = write(tmp_path, '[embed]\nmodel_dir = "models/mini"\n')
    assert config.load(path, env={}).embed.model_dir == str(tmp_path / "models" / "mini")
    assert config.load(path, env={"MEMQ_EMBED_MODEL_DIR": "/abs"}).embed.model_dir == "/abs"


def test_no_redis_url_anywhere_finds_the_private_redis_of_memq_up(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    (tmp_path / "data").mkdir()
    (tmp_path / "data" / "admin.url").write_text("unix://memq-admin:a@/x/redis.sock\n")
    (tmp_path / "data" / "agent.url").write_text("unix://memq-agent:b@/x/redis.sock\n")
    assert config.load(env={}).redis_url == "unix://memq-admin:a@/x/redis.sock"
    # Each process reads its role's file: the admin's unless told otherwise.
    assert config.load(env={}, role="agent").redis_url == "unix://memq-agent:b@/x/redis.sock"
    assert config.load(env={}, role="worker").redis_url == config.DEFAULT_REDIS_URL
    # Beside the database actually used.
    other = tmp_path / "other" / "memq.db"
    assert config.load(env={"MEMQ_DB": str(other)}).redis_url == config.DEFAULT_REDIS_URL
    # A URL said anywhere wins, even one equal to the default.
    assert config.load(env={"MEMQ_REDIS_URL": "redis://env"}).redis_url == "redis://env"
    path = write(tmp_path, f'redis_url = "{config.DEFAULT_REDIS_URL}"\n')
    assert config.load(path, env={}).redis_url == config.DEFAULT_REDIS_URL
    assert config.load(env={}, redis_url="redis://flag").redis_url == "redis://flag"
    assert config.load(env={}, discover_redis=False).redis_url == config.DEFAULT_REDIS_URL
