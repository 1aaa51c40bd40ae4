"""Shared fixtures: a real redis-server on a free port, a real SQLite file, a real writer."""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
import redis

from memq.config import Config, EmbedConfig
from producers import MemoryClient
from store.service import open_writer
from store.writer import Writer

ROOT = Path(__file__).resolve().parent.parent
MODEL_DIR = Path(os.environ.get("MEMQ_EMBED_MODEL_DIR", ROOT / "models" / "all-MiniLM-L6-v2"))
LOCOMO = ROOT.parent / "shared" / "data" / "locomo-dev.json"


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


class RedisServer:
    """A private redis-server process; ``restart`` keeps its append-only file."""

    def __init__(self, directory: Path, *, appendonly: bool = False) -> None:
        self.directory = directory
        self.port = free_port()
        self.appendonly = appendonly
        self.proc: subprocess.Popen[bytes] | None = None

    @property
    def url(self) -> str:
        return f"redis://127.0.0.1:{self.port}/0"

    def start(self) -> None:
        binary = shutil.which("redis-server")
        if binary is None:
            pytest.fail("redis-server is not installed: run `make test`, which installs it")
        self.proc = subprocess.Popen(
            [binary, "--port", str(self.port), "--bind", "127.0.0.1", "--save", "",
             "--appendonly", "yes" if self.appendonly else "no", "--dir", str(self.directory)],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        client = redis.Redis(port=self.port)
        for _ in range(200):
            try:
                client.ping()
                return
            except redis.ConnectionError:
                time.sleep(0.02)
        pytest.fail(f"redis-server did not start on port {self.port}")

    def stop(self) -> None:
        if self.proc is not None:
            self.proc.terminate()
            self.proc.wait(10)
            self.proc = None

    def restart(self) -> None:
        self.stop()
        self.start()


@pytest.fixture(scope="session")
def redis_server() -> Iterator[RedisServer]:
    with tempfile.TemporaryDirectory(prefix="memq-redis-") as tmp:
        server = RedisServer(Path(tmp))
        server.start()
        yield server
        server.stop()


@pytest.fixture
def redis_url(redis_server: RedisServer) -> str:
    redis.Redis.from_url(redis_server.url).flushall()
    return redis_server.url


@pytest.fixture
def config(redis_url: str, tmp_path: Path) -> Config:
    return Config(
        redis_url=redis_url,
        db_path=str(tmp_path / "memq.db"),
        embed=EmbedConfig(model_dir=str(MODEL_DIR)),
    )


class WriterThread:
    """The real writer, run in a thread of the test process."""

    def __init__(self, config: Config) -> None:
        self.config = config
        self.writer: Writer | None = None
        self.stop_event = threading.Event()
        self.thread: threading.Thread | None = None

    def start(self) -> Writer:
        self.writer = open_writer(self.config, redis.Redis.from_url(self.config.redis_url))
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


@pytest.fixture
def writer(config: Config) -> Iterator[WriterThread]:
    running = WriterThread(config)
    running.start()
    yield running
    running.stop()


@pytest.fixture
def client(config: Config, writer: WriterThread) -> Iterator[MemoryClient]:
    with MemoryClient(config=config) as memory:
        yield memory


def memq_command(*args: str) -> list[str]:
    return [sys.executable, "-m", "memq", *args]


def start_writer_process(config: Config) -> subprocess.Popen[bytes]:
    """``memq writer`` as a real process (for kill tests)."""
    return subprocess.Popen(
        memq_command("writer", "--db", config.db_path, "--redis-url", config.redis_url),
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        cwd=ROOT,
    )
