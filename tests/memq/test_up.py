"""``memq up`` as a real process: private Redis on a unix socket, the whole stack, a crashed
worker restarted, SIGTERM stops everything in order and exits 0, and a restart keeps data."""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import threading
import time
from argparse import Namespace
from pathlib import Path

import pytest

from memq import MemoryClient
from memq.authority import Role
from memq.cli import command_names
from memq.cli.up import PROCESSES, copies, embed_workers, selected
from memq.config import EmbedConfig
from memq.inbox import send_to_inbox
from tests.conftest import MODEL_DIR, ROOT
from tests.memq.test_supervisor import pid_alive

STARTED = re.compile(r"^up +\| started (\S+) \(pid (\d+)\)$")


class Stack:
    """A running ``memq up``: its output lines, the pids it started, its Redis URL."""

    def __init__(self, data: Path, config: Path, *extra: str) -> None:
        env = {k: v for k, v in os.environ.items() if k not in ("MEMQ_REDIS_URL", "MEMQ_DB")}
        env.update(PYTHONPATH=str(ROOT), MEMQ_EMBED_MODEL_DIR=str(MODEL_DIR),
                   MEMQ_LOG_FORMAT="json")
        self.data = data
        self.lines: list[str] = []
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "memq", "up", "--db", str(data / "memq.db"),
             "--config", str(config), *extra],
            cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
        )
        self.reader = threading.Thread(target=self._read, daemon=True)
        self.reader.start()

    def _read(self) -> None:
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            self.lines.append(line.rstrip("\n"))

    def wait_for(self, pattern: str, count: int = 1, limit: float = 60.0) -> None:
        deadline = time.monotonic() + limit
        while time.monotonic() < deadline:
            if sum(1 for line in self.lines if re.search(pattern, line)) >= count:
                return
            if self.proc.poll() is not None:
                break
            time.sleep(0.05)
        tail = "\n".join(self.lines[-40:])
        pytest.fail(f"no {count} line(s) matching {pattern!r}; output ends with:\n{tail}")

    def pids(self, name: str | None = None) -> list[int]:
        found = [STARTED.match(line) for line in self.lines]
        return [int(m[2]) for m in found if m and (name is None or m[1] == name)]

    @property
    def redis_url(self) -> str:
        """The admin's URL, as the CLI finds it."""
        return self.url(Role.ADMIN)

    def url(self, role: Role) -> str:
        return (self.data / f"{role.value}.url").read_text().strip()

    def stop(self) -> int:
        self.proc.send_signal(signal.SIGTERM)
        code = self.proc.wait(90)
        self.reader.join(10)
        return code

    def kill(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait()


@pytest.fixture
def ops_config(tmp_path: Path) -> Path:
    path = tmp_path / "memq.toml"
    path.write_text("[ops]\nrestart_backoff_s = 0.2\ndrain_timeout_s = 5.0\n")
    return path


def processes_with(text: str) -> list[int]:
    """Pids of running processes whose command line mentions ``text``."""
    found = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                cmdline = (entry / "cmdline").read_bytes().replace(b"\0", b" ").decode()
            except OSError:
                continue
            if text in cmdline and pid_alive(int(entry.name)):
                found.append(int(entry.name))
    return found


def line_index(stack: Stack, text: str) -> int:
    return next(i for i, line in enumerate(stack.lines) if text in line)


@pytest.mark.slow
def test_up_serves_restarts_and_stops_cleanly(tmp_path: Path, ops_config: Path) -> None:
    data = tmp_path / "data"
    stack = Stack(data, ops_config, "--demo")
    try:
        stack.wait_for(r"memq is up")
        url = stack.redis_url
        assert url.startswith("unix://memq-admin:")
        assert url.endswith(f"@{data / 'redis.sock'}?db=0")
        for role in Role:
            assert (data / f"{role.value}.url").stat().st_mode & 0o777 == 0o600
        assert (data / "users.acl").stat().st_mode & 0o777 == 0o600

        # append -> committed, through the stack's own Redis and writer, as an agent
        with MemoryClient(redis_url=stack.url(Role.AGENT), db_path=data / "memq.db") as client:
            ids = [client.append("up-test", "user", f"turn {i}") for i in range(3)]
            client.flush(30)
            assert [m.id for m in client.history("up-test")] == ids

        # a second `memq up` for the same data directory refuses to start
        second = subprocess.run(
            [sys.executable, "-m", "memq", "up", "--db", str(data / "memq.db")],
            cwd=ROOT, env={**os.environ, "PYTHONPATH": str(ROOT)}, capture_output=True,
            text=True, timeout=60)
        assert second.returncode == 1
        assert "is `memq up` already running" in second.stderr
        assert stack.redis_url == url  # the refused one left the running one's file alone

        # the demo runs on a fresh data directory, once the writer is up
        stack.wait_for(r"^demo +\| +support: 16 turns committed")

        # a worker killed with SIGKILL comes back
        (first,) = stack.pids("embed")
        os.kill(first, signal.SIGKILL)
        stack.wait_for(r"embed exited with status -9; restarting")
        stack.wait_for(r"started embed \(pid", count=2)
        assert stack.pids("embed")[1] != first
    finally:
        code = stack.stop() if stack.proc.poll() is None else stack.proc.returncode
        stack.kill()
    assert code == 0, "\n".join(stack.lines[-40:])
    assert not [pid for pid in stack.pids() if pid_alive(pid)]
    assert not processes_with(str(data))  # no redis-server, no child of any kind
    assert not (data / "redis.sock").exists()
    urls = {role: stack.url(role) for role in Role}  # kept: agents hold them
    # workers first, then the writer, then Redis
    assert line_index(stack, "embed stopped") < line_index(stack, "stopping writer")
    assert line_index(stack, "writer stopped (exit status 0)") < line_index(
        stack, "stopping redis")

    # A second start finds the data (Redis' append-only file and the database) and no demo.
    again = Stack(data, ops_config, "--demo")
    try:
        again.wait_for(r"memq is up")
        again.wait_for(r"already exists: skipping the demo")
        assert {role: again.url(role) for role in Role} == urls  # the same credentials
        with MemoryClient(redis_url=again.redis_url, db_path=data / "memq.db") as client:
            assert [m.id for m in client.history("up-test")] == ids
            assert client.redis.exists("memq:writer:stats")  # kept by the append-only file
    finally:
        code = again.stop() if again.proc.poll() is None else again.proc.returncode
        again.kill()
    assert code == 0
    assert not processes_with(str(data))


@pytest.mark.slow
@pytest.mark.model
def round_trip_to_get_context(stack: Stack, data: Path) -> None:
    """append -> embedded -> get_context through ``memq up``, with two embed workers."""
    stack.wait_for(r"2 embed workers: \[embed\] workers sets it")
    assert len(stack.pids("embed")) == len(stack.pids("embed-2")) == 1
    agent_url = stack.url(Role.AGENT)  # and the workers run with the worker's
    with MemoryClient(redis_url=agent_url, db_path=data / "memq.db") as client:
        target = client.append("ctx", "user", "The billing service is deployed to "
                               "Kubernetes every Tuesday with a blue-green rollout.")
        for i in range(12):
            client.append("ctx", "user", f"unrelated small talk number {i}")
        client.flush(30)
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline:
            with client.readers.connection() as conn:
                left = conn.execute("SELECT count(*) FROM messages WHERE session_id = "
                                    "'ctx' AND embedding IS NULL").fetchone()[0]
            if left == 0:
                break
            time.sleep(0.2)
        assert left == 0, "the embed worker did not embed the messages"
        items = client.get_context("ctx", query="When is billing deployed to Kubernetes?")
    found = {item.id: item for item in items}
    assert "semantic" in found[target].branches


def test_missing_commands_are_skipped_with_a_warning() -> None:
    chosen, warnings = selected(Namespace(dashboard=False, metrics=False),
                                {"writer", "worker"})
    assert [p.name for p in chosen] == ["writer", "embed", "consolidate", "tasks", "deliver"]
    assert warnings == ["skipping scheduler: this build has no `memq scheduler` command yet",
                        "skipping webhooks: this build has no `memq webhooks` command yet"]


def test_extras_start_only_when_asked() -> None:
    everything = command_names() | {"scheduler"}
    chosen, _ = selected(Namespace(dashboard=True, metrics=False), everything)
    assert [p.name for p in chosen][-3:] == ["scheduler", "webhooks", "dashboard"]


def test_procfile_lists_the_same_processes() -> None:
    lines = (ROOT / "Procfile").read_text().splitlines()
    entries = [line for line in lines if line and not line.startswith("#")]
    assert entries == [f"{p.name}: memq {' '.join(p.command)}" for p in PROCESSES]


@pytest.mark.parametrize(("cores", "threads", "expected"),
                         [(1, 1, 1), (2, 1, 1), (4, 1, 3), (16, 1, 15), (8, 2, 3), (2, 4, 1)])
def test_up_runs_one_embed_worker_per_core_left_after_the_writer(
    cores: int, threads: int, expected: int
) -> None:
    assert embed_workers(EmbedConfig(threads=threads), cores) == expected


def test_configured_embed_workers_win_and_get_names_of_their_own() -> None:
    assert embed_workers(EmbedConfig(workers=5), cores=2) == 5
    embed = next(p for p in PROCESSES if p.name == "embed")
    writer = next(p for p in PROCESSES if p.name == "writer")
    assert copies(embed, 3) == ["embed", "embed-2", "embed-3"]
    assert copies(writer, 3) == ["writer"]
    deliver = next(p for p in PROCESSES if p.name == "deliver")
    assert copies(deliver, 3) == ["deliver", "deliver-2"]  # one more than a hanging receiver


@pytest.mark.slow
def test_up_answers_get_context_and_enforces_the_roles(tmp_path: Path,
                                                       ops_config: Path) -> None:
    """Through ``memq up`` with two embed workers, a turn is embedded and found; and with its
    Redis, an agent's credentials cannot do the person's or a worker's work: neither through
    the client nor with raw Redis commands. (One stack for both: each costs seconds of CPU.)"""
    import apsw
    import redis
    from rq import Queue

    from memq import names
    from memq.errors import PermissionDenied
    from memq.testing import wait_committed
    from tests.producers.test_permissions import ADMIN_OPERATIONS, RAW_FORGERIES

    data = tmp_path / "data"
    ops_config.write_text(ops_config.read_text() + "[embed]\nworkers = 2\n")
    stack = Stack(data, ops_config)
    try:
        stack.wait_for(r"memq is up")
        round_trip_to_get_context(stack, data)
        db = data / "memq.db"
        with pytest.raises(redis.exceptions.AuthenticationError):
            redis.Redis(unix_socket_path=str(data / "redis.sock")).ping()  # default: off
        admin_redis = redis.Redis.from_url(stack.redis_url)
        with MemoryClient(redis_url=stack.redis_url, db_path=db) as admin, \
                MemoryClient(redis_url=stack.url(Role.AGENT), db_path=db) as agent:
            assert (admin.role, agent.role) == (Role.ADMIN, Role.AGENT)
            admin.set_fact("user", "name", "Dana", source="user")
            task_id = admin.schedule_task("backup", "every day at 3am", "back up", trusted=True)
            admin.flush(30)
            for operation in ADMIN_OPERATIONS.values():
                with pytest.raises(PermissionDenied):
                    operation(agent)
            for change in (agent.pause_task, agent.resume_task, agent.delete_task):
                with pytest.raises(PermissionDenied):
                    change(task_id)
            raw = agent.redis
            for forged in RAW_FORGERIES.values():
                send_to_inbox(raw, [forged], names.INBOX_STREAM)
                for stream in names.INBOX_STREAMS:
                    with pytest.raises(redis.exceptions.NoPermissionError):
                        raw.xadd(stream, {names.EVENT_FIELD: forged})
            for command in (("HSET", f"rq:job:{names.TASK_JOB_PREFIX}x", "data", "x"),
                            ("LPUSH", f"rq:queue:{names.QUEUE_TASKS}", "x"),
                            ("XADD", names.AGENT_INBOX_STREAM, "*", "prompt", "forged")):
                with pytest.raises(redis.exceptions.NoPermissionError):
                    raw.execute_command(*command)
            with pytest.raises(redis.exceptions.NoPermissionError):
                Queue(names.QUEUE_TASKS, connection=raw).enqueue("builtins.print")
            wait_committed(admin_redis, timeout=30)
            assert [f.value for f in admin.facts("user")] == ["Dana"]
            assert admin.task(task_id).is_trusted
            assert not admin.task(task_id).is_paused
        conn = apsw.Connection(str(db), flags=apsw.SQLITE_OPEN_READONLY)
        reasons = [r[0] for r in conn.execute("SELECT reason FROM rejected_events")]
        prefixes = conn.execute("SELECT count(*) FROM terminal_allowed_prefixes").fetchone()
        conn.close()
        assert len(reasons) == len(RAW_FORGERIES)
        assert all("not from an agent (memq:inbox)" in reason for reason in reasons)
        assert prefixes == (0,)

        # Next to the data, each finds its own credentials: an agent's client, the CLI.
        env = {k: v for k, v in os.environ.items() if k != "MEMQ_REDIS_URL"}
        found = subprocess.run(
            [sys.executable, "-c", "from memq import MemoryClient\n"
             "print(MemoryClient.from_env().role.value)"],
            cwd=ROOT, env={**env, "MEMQ_DB": str(db), "PYTHONPATH": str(ROOT)},
            capture_output=True, text=True, timeout=60)
        assert found.stdout.strip() == "agent", found.stderr
        status = subprocess.run(
            [sys.executable, "-m", "memq", "status", "--db", str(db)],
            cwd=ROOT, env={**env, "PYTHONPATH": str(ROOT)},
            capture_output=True, text=True, timeout=60)
        assert "trust     roles enforced by the ACL users memq-admin, memq-agent, memq-worker;" \
               " this command runs as memq-admin\n" in status.stdout, status.stdout
    finally:
        code = stack.stop() if stack.proc.poll() is None else stack.proc.returncode
        stack.kill()
    assert code == 0


@pytest.mark.parametrize("fsync", ["everysec", "always"])
def test_the_private_redis_syncs_its_log_as_configured(tmp_path: Path, fsync: str) -> None:
    from memq.cli.up import _redis_argv

    argv, _ = _redis_argv("redis-server", tmp_path, tmp_path / "redis.sock", fsync)
    assert argv[argv.index("--appendfsync") + 1] == fsync
    assert argv[argv.index("--appendonly") + 1] == "yes"


def test_with_sentinels_each_process_gets_its_roles_url_file(tmp_path: Path) -> None:
    from memq import acl
    from memq.cli.up import sentinel_role_urls
    from memq.config import Config
    from memq.redis_config import RedisConfig

    config = Config(db_path=str(tmp_path / "memq.db"),
                    redis=RedisConfig(sentinels=("127.0.0.1:26379",)))
    args = Namespace(redis_url=None)
    assert sentinel_role_urls(args, config) is None  # no URL files: one URL for all
    urls = {role: f"redis://{role.value}:pw@mymaster/0" for role in Role}
    acl.write_url_files(tmp_path, urls)
    assert sentinel_role_urls(args, config) == urls
    assert sentinel_role_urls(Namespace(redis_url="redis://x/0"), config) is None
    assert sentinel_role_urls(args, config.replace(redis=RedisConfig())) is None


@pytest.mark.parametrize(("flags", "named"), [
    (["--serve"], "for serve"), (["--serve", "--port", "{port}"], "for serve"),
    (["--dashboard"], "for dashboard"), (["--metrics"], "for metrics"),
])
def test_a_taken_port_stops_up_at_once_naming_it(
    tmp_path: Path, flags: list[str], named: str
) -> None:
    """Before, the server was restarted until the supervisor gave up and stopped the
    stack, and the README's curl commands reached whatever held the port."""
    import socket

    from memq.testing import free_port

    port = free_port()
    settings = tmp_path / "memq.toml"
    settings.write_text(f"[ops]\ndashboard_port = {port}\nmetrics_port = {port}\n")
    with socket.socket() as holder:
        holder.bind(("127.0.0.1", port))
        holder.listen()
        argv = [sys.executable, "-m", "memq", "up", "--db", str(tmp_path / "data" / "memq.db"),
                "--config", str(settings), *(f.format(port=port) for f in flags)]
        if flags == ["--serve"]:
            argv += ["--port", str(port)]
        env = {**os.environ, "MEMQ_EMBED_MODEL_DIR": str(MODEL_DIR)}
        done = subprocess.run(argv, cwd=ROOT, capture_output=True, text=True, timeout=60,
                              check=False, env=env)
    assert done.returncode == 1
    assert f"port {port} on 127.0.0.1, {named}, is taken" in done.stderr
    assert not (tmp_path / "data" / "redis.sock").exists()  # nothing was started
