"""``memq up``: the whole stack for one machine, in the foreground.

It starts a private ``redis-server`` in the data directory (the directory of the database)
unless a Redis URL is configured, then the processes of :data:`PROCESSES` (the same table
the ``Procfile`` lists), and supervises them (:mod:`memq.supervisor`). Ctrl-C or SIGTERM
stops the workers, the scheduler and the extras first, then the writer once the inbox has
drained, then Redis, and exits 0.

The private Redis listens on a unix socket in the data directory, so it can never collide
with a Redis that already runs on the machine; redis-py, RQ, rq-scheduler and rq-dashboard
all accept ``unix://`` URLs. When the socket's path is too long for the kernel (about 107
bytes) it falls back to a free TCP port on 127.0.0.1, with a random password.
"""

from __future__ import annotations

import argparse
import os
import secrets
import shutil
import signal
import socket
import sys
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from memq import broker, names
from memq.cli.common import PRIVATE_REDIS_URL_FILE, add_store_options, load_config
from memq.config import Config
from memq.errors import ConfigError, MemqError
from memq.logs import LOG_FORMAT_ENV, redact_url
from memq.supervisor import ChildSpec, Policy, Supervisor

STOP_FIRST, STOP_WRITER, STOP_REDIS = 0, 1, 2
"""Stop orders: workers, scheduler and extras; then the writer; then Redis."""

MAX_UNIX_SOCKET_PATH = 100
"""Longest socket path used (the kernel's limit is 107 bytes, with a terminating NUL)."""

READY_TIMEOUT_S = 120.0
"""How long ``--demo`` waits for the writer's first heartbeat."""


@dataclass(frozen=True)
class Process:
    """One line of the process table, shared by ``memq up`` and the ``Procfile``."""

    name: str
    command: tuple[str, ...]
    stop_order: int = STOP_FIRST
    option: str | None = None
    """When set, ``memq up`` starts this process only with ``--<option>``."""


PROCESSES = (
    Process("writer", ("writer",), STOP_WRITER),
    Process("embed", ("worker", "embed")),
    Process("consolidate", ("worker", "consolidate")),
    Process("tasks", ("worker", "tasks")),
    Process("scheduler", ("scheduler",)),
    Process("dashboard", ("dashboard",), option="dashboard"),
    Process("metrics", ("metrics",), option="metrics"),
)


def register(sub: Any) -> None:
    parser = sub.add_parser("up", help="run the whole stack on this machine (foreground)")
    add_store_options(parser, redis_help="Redis URL (default: $MEMQ_REDIS_URL; without one, "
                      "a private redis-server in the data directory)")
    parser.add_argument("--dashboard", action="store_true", help="also serve rq-dashboard")
    parser.add_argument("--metrics", action="store_true", help="also serve Prometheus metrics")
    parser.add_argument("--demo", action="store_true",
                        help="run `memq demo` once the stack is ready (fresh data directory only)")
    parser.set_defaults(func=run_up)


def run_up(args: argparse.Namespace) -> int:
    config = load_config(args, discover_redis=False)
    data_dir = Path(config.db_path).resolve().parent
    # Everything the stack writes is private: the database, Redis's append-only file (every
    # event not yet committed), the URL file. The umask is inherited by every child; an
    # existing directory is left as its owner made it.
    os.umask(0o077)
    try:
        data_dir.mkdir(mode=0o700, parents=True, exist_ok=True)
    except OSError as exc:
        raise ConfigError(f"cannot create the data directory {data_dir}: {exc.strerror}") from exc
    fresh = not Path(config.db_path).exists()
    supervisor = Supervisor(_policy(config))
    supervisor.reserve([p.name for p in PROCESSES] + ["redis", "demo"])
    stop = threading.Event()
    for sig in (signal.SIGINT, signal.SIGTERM):
        signal.signal(sig, lambda *_: stop.set())
    url_file = data_dir / PRIVATE_REDIS_URL_FILE
    wrote_url = False
    try:
        if not _redis_configured(args, config):
            config = config.replace(redis_url=start_private_redis(supervisor, data_dir, stop))
            _write_private(url_file, config.redis_url)
            wrote_url = True
        env = child_env(args, config)
        _start_processes(supervisor, args, config, env)
        demo = _DemoLauncher(supervisor, config, env, wanted=args.demo, fresh=fresh)
        _announce(supervisor, config, url_file)
        supervisor.run(stop, on_tick=demo.tick)
    finally:
        supervisor.stop()
        if wrote_url:  # never another `memq up`'s, when this one was refused
            url_file.unlink(missing_ok=True)
    supervisor.say("all stopped")
    return 0


def _policy(config: Config) -> Policy:
    ops = config.ops
    return Policy(backoff_s=ops.restart_backoff_s, backoff_max_s=ops.restart_backoff_max_s,
                  stop_timeout_s=ops.stop_timeout_s)


def _redis_configured(args: argparse.Namespace, config: Config) -> bool:
    from memq.config import DEFAULT_REDIS_URL

    return bool(args.redis_url or os.environ.get("MEMQ_REDIS_URL")
                or config.redis_url != DEFAULT_REDIS_URL)


# -- the processes ---------------------------------------------------------------------------


def selected(args: argparse.Namespace, registered: set[str]) -> tuple[list[Process], list[str]]:
    """The processes to start, and warnings about the ones this build cannot run."""
    chosen, warnings = [], []
    for process in PROCESSES:
        if process.option is not None and not getattr(args, process.option, False):
            continue
        if process.command[0] not in registered:
            warnings.append(f"skipping {process.name}: this build has no "
                            f"`memq {process.command[0]}` command yet")
            continue
        chosen.append(process)
    return chosen, warnings


def _start_processes(
    supervisor: Supervisor, args: argparse.Namespace, config: Config, env: dict[str, str]
) -> None:
    from memq.cli import command_names

    processes, warnings = selected(args, command_names())
    for warning in warnings:
        supervisor.say(warning)
    drain = _drain_inbox(supervisor, config)
    for process in processes:
        supervisor.add(ChildSpec(
            process.name, memq_argv(*process.command), process.stop_order, env=env,
            before_stop=drain if process.stop_order == STOP_WRITER else None,
        ))


def memq_argv(*command: str) -> tuple[str, ...]:
    return (sys.executable, "-m", "memq", *command)


def child_env(args: argparse.Namespace, config: Config) -> dict[str, str]:
    """Settings pass through the environment: every command reads it, flags or not."""
    env = {
        "MEMQ_REDIS_URL": config.redis_url,
        "MEMQ_DB": str(Path(config.db_path).resolve()),
        # Children print to a pipe; without this their lines would arrive in lumps.
        "PYTHONUNBUFFERED": "1",
        LOG_FORMAT_ENV: os.environ.get(LOG_FORMAT_ENV)
        or ("text" if sys.stdout.isatty() else "json"),
    }
    if args.config:
        env["MEMQ_CONFIG"] = str(Path(args.config).resolve())
    return env


def _drain_inbox(supervisor: Supervisor, config: Config) -> Any:
    """Before the writer stops: wait until it has committed what is in the inbox."""

    def wait() -> None:
        client = broker.connect(config.redis_url, timeout_s=2.0)
        deadline = time.monotonic() + config.ops.drain_timeout_s
        with broker.translated(config.redis_url, "waiting for the inbox to drain"):
            while (left := int(client.xlen(names.INBOX_STREAM))) > 0:
                if time.monotonic() >= deadline:
                    supervisor.say(f"{left} inbox entries not committed yet; they stay in "
                                   "Redis for the next start")
                    return
                time.sleep(0.05)

    return wait


# -- the private Redis ---------------------------------------------------------------------


def start_private_redis(supervisor: Supervisor, data_dir: Path, stop: threading.Event) -> str:
    """Start ``redis-server`` with append-only persistence in ``data_dir``; return its URL."""
    binary = shutil.which("redis-server")
    if binary is None:
        raise ConfigError("redis-server is not installed (`make bootstrap` installs it), "
                          "or set MEMQ_REDIS_URL to use a running Redis")
    sock = data_dir / "redis.sock"
    argv, url = _redis_argv(binary, data_dir, sock)
    supervisor.add(ChildSpec("redis", argv, STOP_REDIS))
    client = broker.connect(url, timeout_s=1.0)
    deadline = time.monotonic() + 20.0
    while not stop.is_set():
        try:
            client.ping()
            return url
        except broker.TRANSIENT:
            pass
        supervisor.poll()
        if time.monotonic() >= deadline:
            raise MemqError(f"the private redis-server did not answer at {redact_url(url)}")
        time.sleep(0.05)
    raise MemqError("stopped while redis-server was starting")


def _redis_argv(binary: str, data_dir: Path, sock: Path) -> tuple[tuple[str, ...], str]:
    common = (
        binary, "--dir", str(data_dir), "--daemonize", "no", "--save", "",
        # Append-only: what agents sent but the writer has not committed survives a
        # restart. fsync once a second (Redis' default) rather than per write, which
        # would cap ingest: a power cut may lose the last second of unsent-to-SQLite events.
        "--appendonly", "yes", "--appendfsync", "everysec", "--loglevel", "warning",
    )
    if len(str(sock)) <= MAX_UNIX_SOCKET_PATH:
        _clear_stale_socket(sock)
        argv = (*common, "--port", "0", "--unixsocket", str(sock), "--unixsocketperm", "700")
        return argv, f"unix://{sock}?db=0"
    password = secrets.token_urlsafe(24)
    port = _free_port()
    argv = (*common, "--port", str(port), "--bind", "127.0.0.1", "--requirepass", password)
    return argv, f"redis://:{password}@127.0.0.1:{port}/0"


def _clear_stale_socket(sock: Path) -> None:
    if not sock.exists():
        return
    try:
        broker.connect(f"unix://{sock}", timeout_s=1.0).ping()
    except broker.TRANSIENT:
        sock.unlink()  # left behind by a Redis that was killed
        return
    raise MemqError(f"a Redis already answers at {sock}: is `memq up` already running "
                    f"for {sock.parent}?")


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


# -- readiness, the demo, the banner ---------------------------------------------------------


class _DemoLauncher:
    """Starts ``memq demo`` once the writer's heartbeat shows, on a fresh data directory."""

    def __init__(self, supervisor: Supervisor, config: Config, env: dict[str, str], *,
                 wanted: bool, fresh: bool) -> None:
        self.supervisor = supervisor
        self.env = env
        self.pending = wanted and fresh
        self.deadline = time.monotonic() + READY_TIMEOUT_S
        self.client = broker.connect(config.redis_url, timeout_s=1.0)
        if wanted and not fresh:
            supervisor.say(f"{config.db_path} already exists: skipping the demo "
                           "(`memq demo` runs it again)")

    def tick(self) -> None:
        if not self.pending:
            return
        try:
            ready = self.client.exists(names.WRITER_HEARTBEAT_KEY)
        except broker.TRANSIENT:
            ready = False
        if ready:
            self.pending = False
            self.supervisor.add(ChildSpec("demo", memq_argv("demo"), STOP_FIRST,
                                          restart=False, env=self.env))
        elif time.monotonic() >= self.deadline:
            self.pending = False
            self.supervisor.say(f"the writer did not start within {READY_TIMEOUT_S:g} s: "
                                "skipping the demo")


def _write_private(path: Path, text: str) -> None:
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w") as fh:
        fh.write(text + "\n")


def _announce(supervisor: Supervisor, config: Config, url_file: Path) -> None:
    supervisor.say(f"memq is up: database {config.db_path}, "
                   f"redis {redact_url(config.redis_url)}")
    if url_file.exists():
        supervisor.say(f"  memq commands run here find this Redis through {url_file}; "
                       f"agents elsewhere: MEMQ_REDIS_URL=$(cat {url_file})")
    supervisor.say("  Ctrl-C stops everything (the writer last, once it has drained)")
