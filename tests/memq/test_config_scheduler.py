"""The ``[scheduler]`` section: tasks entries are checked at load, naming the entry."""

from __future__ import annotations

from typing import Any

import pytest

from memq.config import SchedulerConfig, from_mapping
from memq.errors import ConfigError

GOOD = {"name": "backup", "schedule": "daily at 3am", "prompt": "run the backup"}


def load(**scheduler: Any) -> SchedulerConfig:
    return from_mapping({"scheduler": scheduler}).scheduler


def test_defaults_and_a_full_section() -> None:
    assert load() == SchedulerConfig(tz="UTC", handler="", tasks=(), interval_s=1.0)
    full = {**GOOD, "oneshot": False, "trusted": True, "tz": "Europe/Berlin"}
    section = load(tz="America/New_York", handler="pkg.mod:func", interval_s=2,
                   tasks=[full, {**GOOD, "name": "other"}])
    assert section.tasks == (full, {**GOOD, "name": "other"})
    assert section.interval_s == 2.0


@pytest.mark.parametrize(("scheduler", "message"), [
    ({"tasks": ["daily"]}, "[[scheduler.tasks]] entry 1 must be a table, got 'daily'"),
    ({"tasks": [GOOD, {**GOOD, "color": "red"}]},
     "[[scheduler.tasks]] entry 2 ('backup'): unknown key(s) color; known: name, schedule"),
    ({"tasks": [{"name": "x", "schedule": "daily"}]},
     "[[scheduler.tasks]] entry 1 ('x'): missing key 'prompt'"),
    ({"tasks": [{**GOOD, "trusted": "yes"}]},
     "[[scheduler.tasks]] entry 1 ('backup'): trusted must be bool, got 'yes'"),
    ({"tasks": [{**GOOD, "prompt": 3}]},
     "[[scheduler.tasks]] entry 1 ('backup'): prompt must be str, got 3"),
    ({"tasks": [{**GOOD, "name": " "}]},
     "[[scheduler.tasks]] entry 1: name must not be empty"),
    ({"tasks": [{**GOOD, "tz": "Mars/Olympus"}]},
     "[[scheduler.tasks]] entry 1 ('backup'): tz: unknown time zone 'Mars/Olympus'"),
    ({"tasks": [GOOD, GOOD]},
     "[[scheduler.tasks]] entry 2 ('backup'): duplicate name; task names must be unique"),
    ({"tz": "Nowhere"}, "[scheduler] tz: unknown time zone 'Nowhere'"),
    ({"handler": "just_a_module"}, "[scheduler] handler must be 'module:function'"),
    ({"handler": ":func"}, "[scheduler] handler must be 'module:function'"),
    ({"interval_s": 0}, "[scheduler] interval_s must be positive, got 0.0"),
    ({"agent_inbox_maxlen": -1},
     "[scheduler] agent_inbox_maxlen must be 0 (keep all) or more, got -1"),
    ({"agent_inbox_maxlen": "lots"}, "[scheduler] agent_inbox_maxlen must be int"),
    ({"tasks": GOOD}, "[scheduler] tasks must be tuple"),
])
def test_bad_scheduler_settings_name_the_problem(scheduler: dict[str, Any], message: str) -> None:
    with pytest.raises(ConfigError) as caught:
        load(**scheduler)
    assert message in str(caught.value)
