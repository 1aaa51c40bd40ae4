"""``memq tasks parse|list`` and ``memq scheduler``."""

from __future__ import annotations

import subprocess
from datetime import datetime

import orjson
import pytest
import redis

from memq import MemoryClient, names
from memq.cli import main
from memq.config import Config
from tests.conftest import ROOT, memq_command
from tests.scheduled import due_daily, eventually, push, scheduled_jobs, wait_committed


def run_lines(out: str) -> list[str]:
    return [line.strip() for line in out.splitlines() if line.startswith("  ")]


def test_parse_prints_cron_and_next_five_runs(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["tasks", "parse", "every weekday at 8:30am", "--tz", "Europe/Berlin"]) == 0
    out = capsys.readouterr().out
    assert "cron:      30 8 * * 1-5\n" in out
    assert "time zone: Europe/Berlin\n" in out
    runs = run_lines(out)
    assert len(runs) == 5
    assert all(r.split()[0] in {"Mon", "Tue", "Wed", "Thu", "Fri"} for r in runs)
    assert all(" 08:30 CE" in r for r in runs)  # CET or CEST: local time either way
    instants = [datetime.fromisoformat(r.split("(")[1].rstrip(")")) for r in runs]
    assert instants == sorted(set(instants))


def test_parse_joins_words_and_shows_a_oneshot_once(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["tasks", "parse", "daily", "at", "noon"]) == 0
    assert "cron:      0 12 * * *\n" in capsys.readouterr().out
    assert main(["tasks", "parse", "tomorrow at 9am", "--tz", "Asia/Kolkata"]) == 0
    out = capsys.readouterr().out
    assert "one-shot:  runs once" in out
    [run] = run_lines(out)
    assert " 09:00 IST " in run


@pytest.mark.parametrize(("args", "message"), [
    (["whenever"], "memq: error: cannot understand schedule 'whenever'; try e.g."),
    (["daily", "--tz", "Mars/Olympus"], "memq: error: unknown time zone 'Mars/Olympus'"),
    (["daily", "--tz", ""], "memq: error: unknown time zone ''"),  # not the configured one
    (["every 0 minutes"], "memq: error: 'every 0 minutes': N must be 1-59 minutes"),
])
def test_parse_errors_are_one_line(capsys: pytest.CaptureFixture[str], args: list[str],
                                   message: str) -> None:
    assert main(["tasks", "parse", *args]) == 2  # the command line's text: a usage error
    err = capsys.readouterr().err
    assert err.startswith(message)
    assert err.count("\n") == 1


@pytest.mark.redis
def test_list_shows_committed_tasks(client: MemoryClient, config: Config,
                                    capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["tasks", "list", "--db", config.db_path]) == 0
    assert capsys.readouterr().out == "no scheduled tasks\n"
    task_id = client.schedule_task("standup", "weekdays at 9am", "post it", trusted=True)
    client.flush()
    assert main(["tasks", "list", "--db", config.db_path]) == 0
    out = capsys.readouterr().out
    assert out.startswith(f"{task_id}  'standup' [tool]  'weekdays at 9am' = 0 9 * * 1-5 (UTC)"
                          "  trusted  next: ")
    assert main(["tasks", "list", "--json", "--db", config.db_path]) == 0
    [task] = orjson.loads(capsys.readouterr().out)["tasks"]
    assert task["id"] == task_id


@pytest.mark.redis
def test_scheduler_command_moves_a_due_run_onto_the_tasks_queue(
    client: MemoryClient, config: Config
) -> None:
    broker = redis.Redis.from_url(config.redis_url)
    scheduled = due_daily()
    push(broker, scheduled)
    wait_committed(broker)
    [job_id] = eventually(lambda: list(scheduled_jobs(broker)), "the run")
    done = subprocess.run(
        memq_command("scheduler", "--burst", "--redis-url", config.redis_url),
        capture_output=True, text=True, timeout=120, cwd=ROOT,
    )
    assert done.returncode == 0, done.stderr
    assert scheduled_jobs(broker) == {}
    assert broker.lrange(f"rq:queue:{names.QUEUE_TASKS}", 0, -1) == [job_id.encode()]


def test_scheduler_interval_must_be_positive(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exited:
        main(["scheduler", "--interval", "0"])
    assert exited.value.code == 2
    assert "must be a positive number of seconds, got 0" in capsys.readouterr().err
