"""Helpers for testing code that uses memq, with real parts: a throwaway ``redis-server`` on
a free port, the writer in a thread, and queued jobs run in-process.

Like the CLI, this module composes the roles (it starts a writer and runs workers' jobs),
so it is not part of the contract that workers and producers import::

    with RedisServer(tmp_dir) as server:
        config = Config(redis_url=server.url, db_path=f"{tmp_dir}/memq.db")
        with WriterThread(config):
            ...
"""

from __future__ import annotations

import collections
import contextlib
import itertools
import os
import random
import shutil
import socket
import subprocess
import threading
import time
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

import redis

from memq import names
from memq.broker import client_for
from memq.config import Config
from memq.errors import ConfigError, MemqError
from memq.inbox import caught_up, committed_marks, inbox_marks

if TYPE_CHECKING:
    from memq.events import Event
    from memq.store.write.batch import BatchResult
    from memq.store.write.writer import Writer

__all__ = ["RedisServer", "WriterThread", "apply_events", "free_port", "inbox_entries",
           "run_queued_jobs", "wait_committed"]


PORT_BASE, PORTS_PER_PROCESS = 20_000, 1_000
"""Test processes run side by side (pytest-xdist's ``gw0``, ``gw1``...) each take ports from
a range of their own, below the kernel's ephemeral range: a port the kernel hands one
process for ``bind(0)`` could be handed to another before the first one's server binds it,
and the two would then talk to each other's servers."""

_HANDED_OUT: collections.deque[int] = collections.deque(maxlen=64)
"""Ports this process handed out lately: a test that asks for two ports before it starts
either server must not get the same one twice."""


def free_port() -> int:
    """A TCP port on 127.0.0.1 that nothing listens on right now (in this test process's
    own range when run side by side with others)."""
    worker = os.environ.get("PYTEST_XDIST_WORKER", "")
    if not (worker.startswith("gw") and worker[2:].isdigit()):
        return _bindable(0)
    low = PORT_BASE + int(worker[2:]) * PORTS_PER_PROCESS
    for port in random.sample(range(low, low + PORTS_PER_PROCESS), 100):
        if port in _HANDED_OUT:
            continue
        with contextlib.suppress(OSError):
            _HANDED_OUT.append(_bindable(port))
            return port
    raise MemqError(f"no free port in {low}-{low + PORTS_PER_PROCESS - 1}")


def _bindable(port: int) -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", port))
        return int(sock.getsockname()[1])


class RedisServer:
    """A private redis-server process on a free port; ``restart`` keeps its append-only file.

    ``replica_of`` (a port on 127.0.0.1) starts it as that server's replica; ``sentinel``
    starts a sentinel (``redis-server --sentinel``) monitoring the master on that port as
    ``service``, deciding it down after ``down_after_ms`` without an answer.
    """

    def __init__(self, directory: Path, *, appendonly: bool = False,
                 replica_of: int | None = None, port: int | None = None,
                 options: Sequence[str] = ()) -> None:
        self.directory = Path(directory)
        self.options = tuple(options)
        """More ``redis-server`` options, e.g. ``("--appendfsync", "always")``."""
        self.port = port or free_port()
        self.appendonly = appendonly
        self.replica_of = replica_of
        self.sentinel: tuple[int, str, int] | None = None
        """(master port, service, down_after_ms) for a sentinel."""
        self.proc: subprocess.Popen[bytes] | None = None

    @classmethod
    def sentinel_of(cls, directory: Path, master_port: int, *, service: str = "mymaster",
                    down_after_ms: int = 1000) -> RedisServer:
        server = cls(directory)
        server.sentinel = (master_port, service, down_after_ms)
        return server

    @property
    def url(self) -> str:
        return f"redis://127.0.0.1:{self.port}/0"

    def start(self) -> None:
        binary = shutil.which("redis-server")
        if binary is None:
            raise ConfigError("redis-server is not installed (`make bootstrap` installs it)")
        self.proc = subprocess.Popen(
            self._argv(binary), stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        client = redis.Redis(port=self.port)
        for _ in range(500):
            try:
                client.ping()
                return
            except redis.ConnectionError:
                time.sleep(0.02)
        raise MemqError(f"redis-server did not start on port {self.port}")

    def _argv(self, binary: str) -> list[str]:
        if self.sentinel is not None:
            return [binary, str(self._sentinel_file()), "--sentinel"]
        argv = [binary, "--port", str(self.port), "--bind", "127.0.0.1", "--save", "",
                "--appendonly", "yes" if self.appendonly else "no", "--dir", str(self.directory)]
        if self.replica_of is not None:
            argv += ["--replicaof", "127.0.0.1", str(self.replica_of)]
        return [*argv, *self.options]

    def _sentinel_file(self) -> Path:
        # A sentinel rewrites its file as it learns (replicas, other sentinels, failovers).
        assert self.sentinel is not None
        master_port, service, down_after_ms = self.sentinel
        path = self.directory / f"sentinel-{self.port}.conf"
        if not path.exists():
            path.write_text(
                f"port {self.port}\nbind 127.0.0.1\ndir {self.directory}\n"
                f"sentinel monitor {service} 127.0.0.1 {master_port} 2\n"
                f"sentinel down-after-milliseconds {service} {down_after_ms}\n"
                f"sentinel failover-timeout {service} {max(3000, 4 * down_after_ms)}\n")
        return path

    def kill(self) -> None:
        """SIGKILL: no goodbye, no final write, as a crashed host."""
        if self.proc is not None:
            self.proc.kill()
            self.proc.wait(10)
            self.proc = None

    def stop(self) -> None:
        if self.proc is not None:
            self.proc.terminate()
            self.proc.wait(10)
            self.proc = None

    def restart(self) -> None:
        self.stop()
        self.start()

    def __enter__(self) -> RedisServer:
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()


class WriterThread:
    """The real writer, run in a thread of this process."""

    def __init__(self, config: Config, *, rebind: bool = False) -> None:
        self.config = config
        self.rebind = rebind
        """Take the Redis keyspace over from another database (see memq/identity.py)."""
        self.writer: Writer | None = None
        self.stop_event = threading.Event()
        self.thread: threading.Thread | None = None

    def start(self) -> Writer:
        from memq.store.write.service import open_writer

        self.writer = open_writer(self.config, client_for(self.config), rebind=self.rebind)
        self.stop_event.clear()
        self.thread = threading.Thread(target=self.writer.run, args=(self.stop_event,),
                                       daemon=True)
        self.thread.start()
        return self.writer

    def stop(self) -> None:
        if self.thread is not None and self.writer is not None:
            self.stop_event.set()
            self.thread.join(30)
            self.writer.close()
            self.thread = None

    def __enter__(self) -> WriterThread:
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()


_stream_ids = itertools.count(1)


def apply_events(writer: Writer, events: list[Event | bytes], *,
                 stream: str = names.ADMIN_INBOX_STREAM) -> BatchResult:
    """Apply ``events`` (or raw wire entries) as one inbox batch, without Redis.

    They take the writer's own path -- decoded, validated and judged as entries of
    ``stream`` (admin's by default: anything may come on it), applied in one transaction
    with the fast path and its per-event fallback -- under made-up stream ids; nothing is
    acknowledged anywhere. For tests and benches that need a database built exactly as
    the writer builds it.
    """
    from memq.events import encode
    from memq.store.write import batch

    entries = [batch.Entry(stream, f"{next(_stream_ids)}-0".encode(),
                           {names.EVENT_FIELD: e if isinstance(e, bytes) else encode(e)})
               for e in events]
    decoded = batch.decode_entries(entries, writer.config.limits)
    return writer.apply_batch(decoded, entries[-1].id.decode())


def inbox_entries(connection: redis.Redis) -> int:
    """How many entries the inbox streams hold, every role's: a client's stream depends on
    its credentials (the default user's events go to the admins' inbox), so a test that
    something was not sent counts them all."""
    return sum(int(connection.xlen(stream)) for stream in names.INBOX_STREAMS)


def wait_committed(connection: redis.Redis, timeout: float = 10.0) -> None:
    """Return once the writer has committed every entry sent to the inbox streams so far."""
    marks = inbox_marks(connection)
    deadline = time.monotonic() + timeout
    while True:
        if caught_up(committed_marks(connection), marks):
            return
        if time.monotonic() > deadline:
            raise MemqError("the writer did not catch up with the inbox")
        time.sleep(0.01)


def run_queued_jobs(config: Config, queue: str, **work: Any) -> None:
    """Run every job queued on ``queue`` in this process (an RQ burst worker), then wait
    until the writer has committed their results."""
    from memq.workers import context
    from memq.workers.queues import worker

    connection = client_for(config)
    context.install(context.WorkerContext(config, connection))
    worker([queue], connection).work(burst=True, with_scheduler=False, **work)
    wait_committed(connection)
