"""``[redis]`` (Sentinel, fsync) and ``[client] wait_replicas``: parsed, overridden by the
environment, and refused with a message naming the bad value."""

from __future__ import annotations

from pathlib import Path

import pytest
from hypothesis import example, given
from hypothesis import strategies as st

from memq import config, redis_config
from memq.errors import ConfigError


def load(tmp_path: Path, text: str, env: dict[str, str] | None = None) -> config.Config:
    path = tmp_path / "memq.toml"
    path.write_text(text)
    return config.load(path, env=env or {}, discover_redis=False)


def test_sentinels_service_and_fsync_from_the_file(tmp_path: Path) -> None:
    cfg = load(tmp_path, '[redis]\nsentinels = ["10.0.0.1:26379", "[::1]:26380"]\n'
                         'service = "memq"\nfsync = "always"\n'
                         '[client]\nwait_replicas = 1\nwait_timeout_s = 2\n')
    assert cfg.redis.sentinel_addresses() == [("10.0.0.1", 26379), ("::1", 26380)]
    assert (cfg.redis.service, cfg.redis.fsync) == ("memq", "always")
    assert (cfg.client.wait_replicas, cfg.client.wait_timeout_s) == (1, 2.0)


def test_defaults_are_one_server_everysec_and_no_waiting(tmp_path: Path) -> None:
    cfg = load(tmp_path, "")
    assert (cfg.redis.sentinels, cfg.redis.service, cfg.redis.fsync) == ((), "mymaster",
                                                                         "everysec")
    assert cfg.client.wait_replicas == 0


def test_the_environment_wins_and_the_password_stays_out_of_reprs(tmp_path: Path) -> None:
    cfg = load(tmp_path, '[redis]\nsentinels = ["a:1"]\n',
               env={"MEMQ_REDIS_SENTINELS": "s1:26379, s2:26379,,",
                    "MEMQ_REDIS_SERVICE": "other", "MEMQ_REDIS_SENTINEL_PASSWORD": "hush"})
    assert cfg.redis.sentinels == ("s1:26379", "s2:26379")
    assert cfg.redis.service == "other"
    assert cfg.redis.sentinel_password == "hush"
    assert "hush" not in repr(cfg)


@pytest.mark.parametrize(("text", "message"), [
    ('[redis]\nsentinels = ["localhost"]', "'localhost' is not 'host:port'"),
    ('[redis]\nsentinels = [":26379"]', "is not 'host:port'"),
    ('[redis]\nsentinels = ["h:0"]', "is not 'host:port'"),
    ('[redis]\nsentinels = ["h:65536"]', "is not 'host:port'"),
    ('[redis]\nsentinels = "h:1"', "sentinels must be tuple"),
    ('[redis]\nservice = " "', "service must not be empty"),
    ('[redis]\nfsync = "no"', "fsync must be one of everysec, always, got 'no'"),
    ('[redis]\nsentinal = []', r"unknown key\(s\) in \[redis\]: sentinal"),
    ("[client]\nwait_replicas = -1", "wait_replicas must be between 0 and 100"),
    ("[client]\nwait_timeout_s = 0", "wait_timeout_s must be between"),
])
def test_bad_values_name_the_problem(tmp_path: Path, text: str, message: str) -> None:
    with pytest.raises(ConfigError, match=message):
        load(tmp_path, text)


def test_a_bad_sentinel_in_the_environment_is_refused_too(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="'nope' is not 'host:port'"):
        load(tmp_path, "", env={"MEMQ_REDIS_SENTINELS": "h:1,nope"})


@given(st.text(max_size=40))
@example("h:\u00b2")  # a digit to str.isdigit, not to int()
@example("[::1]:6379")
def test_any_address_is_a_host_and_port_or_a_config_error(text: str) -> None:
    host, colon, port = text.strip().rpartition(":")
    if colon and host.strip("[]") and port.isascii() and port.isdigit() and 0 < int(port) < 65536:
        assert redis_config.sentinel_address(text) == (host.strip("[]"), int(port))
    else:
        with pytest.raises(ConfigError, match="is not 'host:port'"):
            redis_config.sentinel_address(text)
