"""Configuration: defaults, the file, the environment winning, and clear errors."""

from __future__ import annotations

from pathlib import Path

import pytest

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
        ("colour = 1\n", "unknown top-level key(s) in memq.toml: colour"),
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
    with pytest.raises(ConfigError) as info:
        config.load(write(tmp_path, text), env={})
    assert message in str(info.value)


def test_missing_file_is_an_error(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="configuration file not found"):
        config.load(tmp_path / "nope.toml", env={})


def test_ints_are_accepted_for_floats(tmp_path: Path) -> None:
    cfg = config.load(write(tmp_path, "[retrieval]\nimportance_threshold = 1\n"), env={})
    assert cfg.retrieval.importance_threshold == 1.0
    assert isinstance(cfg.retrieval.importance_threshold, float)
