"""``memq up``: the whole stack for one machine, in the foreground.

It starts a private ``redis-server`` in the data directory (the directory of the database)
unless a Redis URL is configured, then the processes of :data:`PROCESSES` (the same table
the ``Procfile`` lists), and supervises them (:mod:`memq.supervisor`). Ctrl-C or SIGTERM
stops the workers, the scheduler and the extras first, then the writer once the inbox has
drained, then Redis, and exits 0.

Embedding is the stack's throughput ceiling and each embed worker keeps ``[embed] threads``
cores busy while its queue is full, so ``memq up`` runs one embed worker per core left
after the writer (:func:`embed_workers`), named ``embed``, ``embed-2``, ...; ``[embed]
workers`` sets the number instead.

The private Redis listens on a unix socket in the data directory, so it can never collide
with a Redis that already runs on the machine; redis-py, RQ, rq-scheduler and rq-dashboard
all accept ``unix://`` URLs. When the socket's path is too long for the kernel (about 107
bytes) it falls back to a free TCP port on 127.0.0.1.

Its users are memq's three roles (:mod:`memq.acl`), loaded from ``users.acl`` (passwords
stored hashed) with the default user switched off; each process gets its role's URL in
``MEMQ_REDIS_URL`` (workers the worker's, everything else the admin's), and the three URLs
are written to ``agent.url``, ``worker.url`` and ``admin.url`` (0600) in the data
directory, where the CLI and ``MemoryClient.from_env()`` find them. The files stay when the
stack stops, and the next start keeps their passwords, so an agent handed ``agent.url``
keeps working across restarts.
"""

from __future__ import annotations

import argparse
import os
import shutil
import socket
import sys
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import redis

from memq import acl, broker, names
from memq.authority import Role
from memq.cli.common import add_store_options, load_config, port
from memq.config import Config, EmbedConfig
from memq.errors import ConfigError, MemqError
from memq.inbox import caught_up, committed_marks, inbox_marks
from memq.logs import LOG_FORMAT_ENV, redact_url
from memq.signals import stop_on_signals
from memq.supervisor import ChildSpec, Policy, Supervisor

STOP_FIRST, STOP_WRITER, STOP_REDIS = 0, 1, 2
"""Stop orders: workers, scheduler and extras; then the writer; then Redis."""

MAX_UNIX_SOCKET_PATH = 100
"""Longest socket path used (the kernel's limit is 107 bytes, with a terminating NUL)."""

READY_TIMEOUT_S = 120.0
"""How long ``--demo`` waits for the writer's first heartbeat."""

ACL_FILE = "users.acl"
"""The private Redis' users (``redis-server --aclfile``), written (0600) at each start."""


@dataclass(frozen=True)
class Process:
    """One line of the process table, shared by ``memq up`` and the ``Procfile``."""

    name: str
    command: tuple[str, ...]
    stop_order: int = STOP_FIRST
    option: str | None = None
    """When set, ``memq up`` starts this process only with ``--<option>``."""
    role: Role = Role.ADMIN
    """Whose credentials it runs with, on the private Redis."""


PROCESSES = (
    Process("writer", ("writer",), STOP_WRITER),
    Process("embed", ("worker", "embed"), role=Role.WORKER),
    Process("consolidate", ("worker", "consolidate"), role=Role.WORKER),
    Process("tasks", ("worker", "tasks"), role=Role.WORKER),
    Process("deliver", ("worker", "webhooks"), role=Role.WORKER),
    Process("scheduler", ("scheduler",)),
    Process("webhooks", ("webhooks", "run")),
    Process("dashboard", ("dashboard",), option="dashboard"),
    Process("metrics", ("metrics",), option="metrics"),
    Process("serve", ("serve",), option="serve"),
    # Stops with Redis, after the writer: its last commits are shipped before it exits.
    Process("replicate", ("replicate", "--if-configured"), STOP_REDIS, option="replicate"),
)


def register(sub: Any) -> None:
    parser = sub.add_parser("up", help="run the whole stack on this machine (foreground)")
    add_store_options(parser, redis_help="Redis URL (default: $MEMQ_REDIS_URL; without one, "
                      "a private redis-server in the data directory)")
    parser.add_argument("--dashboard", action="store_true", help="also serve rq-dashboard")
    parser.add_argument("--metrics", action="store_true", help="also serve Prometheus metrics")
    parser.add_argument("--serve", action="store_true",
                        help="also serve the HTTP API (`memq serve`, 127.0.0.1:8420)")
    parser.add_argument("--port", type=port, default=DEFAULT_SERVE_PORT,
                        help="with --serve: the API's port (default 8420)")
    parser.add_argument("--demo", action="store_true",
                        help="run `memq demo` once the stack is ready (fresh data directory only)")
    parser.set_defaults(func=run_up)


def run_up(args: argparse.Namespace) -> int:
    from memq.model_files import verify

    config = load_config(args, discover_redis=False)
    # Without the model every embed job would fail, quietly, message after message.
    verify(config.embed.model_dir)
    check_ports(listeners(args, config))
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
    workers = embed_workers(config.embed, available_cores())
    supervisor.reserve([n for p in PROCESSES for n in copies(p, workers)] + ["redis", "demo"])
    stop = stop_on_signals()
    urls: dict[Role, str] | None = None
    try:
        if not _redis_configured(args, config):
            urls = start_private_redis(supervisor, data_dir, stop, fsync=config.redis.fsync)
            config = config.replace(redis_url=urls[Role.ADMIN])
        elif (urls := sentinel_role_urls(args, config)) is not None:
            config = config.replace(redis_url=urls[Role.ADMIN])
        env = child_env(args, config)
        _start_processes(supervisor, args, config, env, workers, urls)
        demo = _DemoLauncher(supervisor, config, env, wanted=args.demo, fresh=fresh)
        _announce(supervisor, config, data_dir if urls else None)
        supervisor.run(stop, on_tick=demo.tick)
    finally:
        supervisor.stop()
    supervisor.say("all stopped")
    return 0


def _policy(config: Config) -> Policy:
    ops = config.ops
    return Policy(backoff_s=ops.restart_backoff_s, backoff_max_s=ops.restart_backoff_max_s,
                  stop_timeout_s=ops.stop_timeout_s)


def sentinel_role_urls(args: argparse.Namespace, config: Config) -> dict[Role, str] | None:
    """With ``[redis] sentinels`` and no URL given, each role's URL file beside the database
    (``memq acl apply``), so each process runs with its own role's credentials, as on the
    private Redis; None when some file is missing (every process then uses the same URL)."""
    from memq.config import DEFAULT_REDIS_URL

    if (not config.redis.sentinels or args.redis_url or os.environ.get("MEMQ_REDIS_URL")
            or config.redis_url != DEFAULT_REDIS_URL):
        return None
    found = {role: acl.read_url_file(Path(config.db_path).resolve().parent, role)
             for role in Role}
    return {role: url for role, url in found.items() if url} if all(found.values()) else None


def _redis_configured(args: argparse.Namespace, config: Config) -> bool:
    from memq.config import DEFAULT_REDIS_URL

    return bool(args.redis_url or os.environ.get("MEMQ_REDIS_URL")
                or config.redis_url != DEFAULT_REDIS_URL or config.redis.sentinels)


# -- the processes ---------------------------------------------------------------------------


def selected(args: argparse.Namespace, registered: set[str]) -> tuple[list[Process], list[str]]:
    """The processes to start, and warnings about the ones this build cannot run.
    ``replicate`` runs when ``[replication] url`` is set (``args.replicate``)."""
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


DEFAULT_SERVE_PORT = 8420


def listeners(args: argparse.Namespace, config: Config) -> list[tuple[str, str, int]]:
    """(process, host, port) of each server ``memq up`` will start."""
    ops = config.ops
    wanted = [("serve", "127.0.0.1", args.port), ("dashboard", ops.dashboard_host,
              ops.dashboard_port), ("metrics", ops.metrics_host, ops.metrics_port)]
    return [(name, host, number) for name, host, number in wanted if getattr(args, name, False)]


def check_ports(wanted: list[tuple[str, str, int]]) -> None:
    """Refuse at once, naming it, a port something else holds: otherwise the process would
    be restarted and given up on, stopping the whole stack, and the README's curl commands
    would reach whatever holds the port."""
    for name, host, number in wanted:
        with socket.socket(socket.AF_INET6 if ":" in host else socket.AF_INET) as probe:
            try:
                probe.bind((host, number))
            except OSError as exc:
                raise ConfigError(
                    f"port {number} on {host}, for {name}, is taken ({exc.strerror}): "
                    f"stop what holds it, or choose another "
                    f"({'--port' if name == 'serve' else f'[ops] {name}_port'})") from exc


def _start_processes(
    supervisor: Supervisor, args: argparse.Namespace, config: Config, env: dict[str, str],
    workers: int, urls: dict[Role, str] | None,
) -> None:
    """Start the processes; on the private Redis, each with its role's credentials."""
    from memq.cli import command_names

    wanted = argparse.Namespace(**{**vars(args), "replicate": bool(config.replication.url)})
    processes, warnings = selected(wanted, command_names())
    for warning in warnings:
        supervisor.say(warning)
    drain = _drain_inbox(supervisor, config)
    supervisor.say(f"{workers} embed worker{'s' if workers > 1 else ''}: "
                   f"{embed_workers_reason(config.embed, available_cores())}")
    for process in processes:
        own = env if urls is None else {**env, "MEMQ_REDIS_URL": urls[process.role]}
        command = process.command
        if process.name == "serve":
            command = (*command, "--port", str(args.port))
        for name in copies(process, workers):
            supervisor.add(ChildSpec(
                name, memq_argv(*command), process.stop_order, env=own,
                before_stop=drain if process.stop_order == STOP_WRITER else None,
            ))


def available_cores() -> int:
    """Cores this process may run on (a container or ``taskset`` may allow fewer)."""
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # not on Linux
        return os.cpu_count() or 1


def embed_workers(embed: EmbedConfig, cores: int) -> int:
    """How many embed workers one machine should run: ``[embed] workers`` when set,
    otherwise one per core left after the writer (each worker's model keeps
    ``[embed] threads`` cores busy while the queue is full), and at least one."""
    if embed.workers:
        return embed.workers
    return max(1, (cores - 1) // embed.threads)


def embed_workers_reason(embed: EmbedConfig, cores: int) -> str:
    if embed.workers:
        return "[embed] workers sets it"
    return (f"one per core left after the writer ({cores} core{'s' if cores > 1 else ''}, "
            f"{embed.threads} model thread{'s' if embed.threads > 1 else ''} per worker; "
            "[embed] workers overrides)")


DELIVER_WORKERS = 2
"""Webhook delivery workers: one more than a receiver that hangs, so that one delays no
other webhook's deliveries (docs/agents.md, Webhooks). Idle, each costs a process."""


def copies(process: Process, embed_workers: int) -> list[str]:
    """The names to run ``process`` under: ``embed``, ``embed-2``, ... for the embed
    workers, ``deliver`` and ``deliver-2`` for the webhooks' deliveries, the process's own
    name once for everything else."""
    count = {"embed": embed_workers, "deliver": DELIVER_WORKERS}.get(process.name, 1)
    return [process.name, *(f"{process.name}-{n}" for n in range(2, count + 1))]


def memq_argv(*command: str) -> tuple[str, ...]:
    return (sys.executable, "-m", "memq", *command)


def child_env(args: argparse.Namespace, config: Config) -> dict[str, str]:
    """Settings pass through the environment: every command reads it, flags or not."""
    env = {
        "MEMQ_REDIS_URL": config.redis_url,
        "MEMQ_DB": str(Path(config.db_path).resolve()),
        "MEMQ_EMBED_MODEL_DIR": config.embed.model_dir,
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
        client = broker.client_for(config, timeout_s=2.0)
        deadline = time.monotonic() + config.ops.drain_timeout_s
        with broker.translated(config.redis_url, "waiting for the inbox to drain"):
            # Committed up to the last entry sent, not an empty stream: with a replica, the
            # writer keeps acknowledged entries for a while ([replication] keep_inbox_s).
            while not caught_up(committed_marks(client), inbox_marks(client)):
                if time.monotonic() >= deadline:
                    supervisor.say("inbox entries not committed yet; they stay in Redis for "
                                   "the next start")
                    return
                time.sleep(0.05)

    return wait


# -- the private Redis ---------------------------------------------------------------------


def start_private_redis(
    supervisor: Supervisor, data_dir: Path, stop: threading.Event, *, fsync: str = "everysec",
) -> dict[Role, str]:
    """Start ``redis-server`` with append-only persistence and memq's ACL users in
    ``data_dir``; return each role's URL, once Redis answers and the files are written."""
    binary = shutil.which("redis-server")
    if binary is None:
        raise ConfigError("redis-server is not installed (`make bootstrap` installs it), "
                          "or set MEMQ_REDIS_URL to use a running Redis")
    argv, base = _redis_argv(binary, data_dir, data_dir / "redis.sock", fsync)
    passwords = acl.saved_passwords(data_dir) or acl.new_passwords()
    _write_private(data_dir / ACL_FILE, acl.acl_file(passwords))
    urls = {role: acl.role_url(base, role, passwords[role]) for role in Role}
    supervisor.add(ChildSpec("redis", (*argv, "--aclfile", str(data_dir / ACL_FILE)),
                             STOP_REDIS))
    _wait_for_redis(supervisor, urls[Role.ADMIN], stop)
    acl.write_url_files(data_dir, urls)
    return urls


def _wait_for_redis(supervisor: Supervisor, url: str, stop: threading.Event) -> None:
    client = broker.connect(url, timeout_s=1.0)
    deadline = time.monotonic() + 20.0
    while not stop.is_set():
        try:
            client.ping()
            return
        except broker.TRANSIENT:
            pass
        supervisor.poll()
        if time.monotonic() >= deadline:
            raise MemqError(f"the private redis-server did not answer at {redact_url(url)}")
        time.sleep(0.05)
    raise MemqError("stopped while redis-server was starting")


def _redis_argv(
    binary: str, data_dir: Path, sock: Path, fsync: str = "everysec",
) -> tuple[tuple[str, ...], str]:
    """The command line of the private Redis, and its URL without credentials."""
    common = (
        binary, "--dir", str(data_dir), "--daemonize", "no", "--save", "",
        # Append-only: what agents sent but the writer has not committed survives a
        # restart. By default ([redis] fsync = "everysec", Redis' own) fsync once a second
        # rather than per write, which costs ingest (see the README's durability figures):
        # a power cut may lose the last second of events not yet committed to SQLite.
        "--appendonly", "yes", "--appendfsync", fsync, "--loglevel", "warning",
    )
    if len(str(sock)) <= MAX_UNIX_SOCKET_PATH:
        _clear_stale_socket(sock)
        listen = ("--port", "0", "--unixsocket", str(sock), "--unixsocketperm", "700")
        return (*common, *listen), f"unix://{sock}?db=0"
    port = _free_port()
    return (*common, "--port", str(port), "--bind", "127.0.0.1"), f"redis://127.0.0.1:{port}/0"


def _clear_stale_socket(sock: Path) -> None:
    if not sock.exists():
        return
    try:
        broker.connect(f"unix://{sock}", timeout_s=1.0).ping()
    except (*broker.REFUSED, redis.exceptions.ResponseError):
        pass  # it answered, if only to refuse us (no credentials): a Redis runs there
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
        self.client = broker.client_for(config, timeout_s=1.0)
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
            # --yes: the data directory was fresh when `memq up` started (checked above).
            self.supervisor.add(ChildSpec("demo", memq_argv("demo", "--yes"), STOP_FIRST,
                                          restart=False, env=self.env))
        elif time.monotonic() >= self.deadline:
            self.pending = False
            self.supervisor.say(f"the writer did not start within {READY_TIMEOUT_S:g} s: "
                                "skipping the demo")


def _write_private(path: Path, text: str) -> None:
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w") as fh:
        fh.write(text + "\n")


def _announce(supervisor: Supervisor, config: Config, data_dir: Path | None) -> None:
    where = redact_url(acl.without_credentials(config.redis_url))
    if config.redis.sentinels:
        where = (f"the master of {config.redis.service!r} named by the sentinels "
                 f"{', '.join(config.redis.sentinels)}")
    supervisor.say(f"memq is up: database {config.db_path}, redis {where}")
    if data_dir is not None:
        agent = data_dir / acl.URL_FILES[Role.AGENT]
        supervisor.say(f"  roles: agents use {agent} (MemoryClient.from_env() here finds it; "
                       f"elsewhere MEMQ_REDIS_URL=$(cat {agent})), workers "
                       f"{data_dir / acl.URL_FILES[Role.WORKER]}; memq commands run here as "
                       f"admin ({data_dir / acl.URL_FILES[Role.ADMIN]})")
    supervisor.say("  Ctrl-C stops everything (the writer last, once it has drained)")
