"""Shared fixtures: a real redis-server on a free port, a real SQLite file, a real writer."""

from __future__ import annotations

import os

# One BLAS thread in every test process and every process a test starts (they inherit
# it), set before numpy loads: the suite runs four processes on two cores, and OpenBLAS'
# threads spin while they wait, so a second thread each only burns the CPU the others
# need (a test of a few eigendecompositions took 4.2 s of CPU with it, 0.2 without).
os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")
# Text logs, whose routine lines (a batch committed, a job done) are left out: a test's
# writer thread logs into the stderr a CLI command run in the test's process writes to,
# and in JSON one of those lines once came first in what a test read as the command's
# error. Tests that read JSON logs ask for them (tests/faults/procs.py).
os.environ.setdefault("MEMQ_LOG_FORMAT", "text")

import contextlib
import io
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path

import apsw
import pytest
import redis

from memq import MemoryClient, acl
from memq.authority import Role
from memq.config import Config, EmbedConfig, RetrievalConfig, WriterConfig
from memq.testing import RedisServer, WriterThread

ROOT = Path(__file__).resolve().parent.parent
MODEL_DIR = Path(os.environ.get("MEMQ_EMBED_MODEL_DIR", ROOT / "models" / "all-MiniLM-L6-v2"))
LOCOMO = ROOT.parent / "shared" / "data" / "locomo-dev.json"


@pytest.fixture(scope="session")
def redis_server() -> Iterator[RedisServer]:
    with tempfile.TemporaryDirectory(prefix="memq-redis-") as tmp:
        server = RedisServer(Path(tmp))
        server.start()
        yield server
        server.stop()


@pytest.fixture(scope="session")
def role_passwords(redis_server: RedisServer) -> dict[Role, str]:
    """memq's three ACL users, created once in the session's Redis (whose default user
    keeps every right, as a Redis without memq's users does)."""
    passwords = acl.new_passwords()
    acl.set_users(redis.Redis.from_url(redis_server.url), passwords)
    return passwords


@pytest.fixture
def role_urls(redis_url: str, role_passwords: dict[Role, str]) -> dict[Role, str]:
    """Each role's URL to the test Redis, with that role's credentials."""
    return {role: acl.role_url(redis_url, role, role_passwords[role]) for role in Role}


@pytest.fixture
def redis_url(redis_server: RedisServer) -> str:
    redis.Redis.from_url(redis_server.url).flushall()
    return redis_server.url


@pytest.fixture
def config(redis_url: str, tmp_path: Path) -> Config:
    """A fresh database on the test's Redis. Most tests observe working memory through
    ``get_context`` without a query, so they use the tri-hybrid profile, whose recency
    shows the last 10 turns; tests of the default profile (``recall``) ask for it."""
    return Config(
        redis_url=redis_url,
        db_path=str(tmp_path / "memq.db"),
        embed=EmbedConfig(model_dir=str(MODEL_DIR)),
        retrieval=RetrievalConfig(profile="tri-hybrid"),
        # A writer stops once its blocking reads return: most tests stop one, and at the
        # default 200 ms that wait was a fifth of the suite's time.
        writer=WriterConfig(block_ms=20),
    )


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


def store_args(config: Config) -> list[str]:
    """A command's options for the test's database and the Redis its writer uses: never
    the default Redis, whose keyspace another memq on the machine may have claimed."""
    return ["--db", config.db_path, "--redis-url", config.redis_url]


def write_directly(db_path: str, sql: str) -> None:
    """Tamper with the database behind the writer's back, waiting for its lock like any
    writer: an idle writer merges its lexical index in short transactions of its own."""
    conn = apsw.Connection(db_path)
    try:
        conn.set_busy_timeout(10_000)
        conn.execute(sql)
    finally:
        conn.close()


def memq_command(*args: str) -> list[str]:
    return [sys.executable, "-m", "memq", *args]


def run_memq(*args: str) -> subprocess.CompletedProcess[str]:
    """``memq ARGS`` run in this process, answered as a shell sees it: exit status, stdout
    and stderr. A command in a process of its own costs a second of CPU (its imports, the
    model), and the suite shares two cores: only what needs its own process gets one."""
    from memq.cli import main

    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        try:
            code = main(list(args))
        except SystemExit as stopped:  # argparse's usage errors
            code = stopped.code if isinstance(stopped.code, int) else 1
    return subprocess.CompletedProcess(["memq", *args], code, out.getvalue(), err.getvalue())


def start_writer_process(config: Config) -> subprocess.Popen[bytes]:
    """``memq writer`` as a real process (for kill tests)."""
    return subprocess.Popen(
        memq_command("writer", "--db", config.db_path, "--redis-url", config.redis_url),
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        cwd=ROOT,
    )


@pytest.fixture(autouse=True)
def _no_process_left_running() -> Iterator[None]:
    """A test that fails half-way still stops the memq processes and the load it started,
    which would otherwise run on through the rest of the suite."""
    yield
    # Not at the top: both import this module.
    from tests.faults.load import stop_leftovers
    from tests.faults.procs import kill_leftovers

    kill_leftovers()
    stop_leftovers()
