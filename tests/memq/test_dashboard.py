"""``memq dashboard`` in a real headless browser: the page lists memq's queues and a worker.

rq-dashboard draws its tables with JavaScript from its JSON endpoints, so the page is
loaded in Debian's chromium (``make bootstrap`` installs it) and its DOM read after the
scripts ran (``--virtual-time-budget``).
"""

from __future__ import annotations

import shutil
import subprocess
import time
import urllib.request
from pathlib import Path

import pytest

from memq import names
from tests.conftest import ROOT, free_port, memq_command

pytestmark = [pytest.mark.redis, pytest.mark.slow]

WORKER_NAME = "dashboard-test-embed"


def chromium() -> str:
    binary = shutil.which("chromium") or shutil.which("chromium-browser")
    if binary is None:
        pytest.fail("chromium is not installed: run `make test`, whose bootstrap installs it")
    return binary


def rendered_dom(url: str, profile: Path) -> str:
    """The page's DOM once its scripts have fetched and drawn their data."""
    result = subprocess.run(
        [chromium(), "--headless", "--no-sandbox", "--disable-gpu",
         "--disable-background-networking", "--disable-component-update", "--disable-sync",
         "--no-first-run", f"--user-data-dir={profile}", "--virtual-time-budget=10000",
         "--dump-dom", url],
        capture_output=True, text=True, timeout=120, check=True,
    )
    return result.stdout


def wait_until_served(url: str, proc: subprocess.Popen[bytes]) -> None:
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            pytest.fail(f"memq dashboard exited with {proc.returncode}")
        try:
            with urllib.request.urlopen(url, timeout=2):
                return
        except OSError:
            time.sleep(0.1)
    pytest.fail(f"memq dashboard did not answer at {url}")


def wait_for_worker(url: str) -> None:
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        with urllib.request.urlopen(url, timeout=2) as response:
            if WORKER_NAME.encode() in response.read():
                return
        time.sleep(0.1)
    pytest.fail(f"worker {WORKER_NAME} never registered")


def listening_addresses(port: int) -> set[str]:
    """Local IPv4 addresses with a socket listening on ``port`` (from /proc/net/tcp)."""
    found = set()
    for line in Path("/proc/net/tcp").read_text().splitlines()[1:]:
        local, state = line.split()[1], line.split()[3]
        address, hex_port = local.split(":")
        if state == "0A" and int(hex_port, 16) == port:
            octets = [str(int(address[i:i + 2], 16)) for i in (6, 4, 2, 0)]
            found.add(".".join(octets))
    return found


@pytest.fixture
def processes():
    started: list[subprocess.Popen[bytes]] = []
    yield started
    for proc in started:
        proc.terminate()
    for proc in started:
        try:
            proc.wait(20)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


def test_dashboard_lists_memq_queues_and_a_worker(
    redis_url: str, tmp_path: Path, processes: list
) -> None:
    port = free_port()
    common = ["--redis-url", redis_url, "--db", str(tmp_path / "memq.db")]
    processes.append(subprocess.Popen(
        memq_command("worker", "embed", "--name", WORKER_NAME, *common), cwd=ROOT,
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL))
    dashboard = subprocess.Popen(memq_command("dashboard", "--port", str(port), *common),
                                 cwd=ROOT, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    processes.append(dashboard)
    base = f"http://127.0.0.1:{port}"
    wait_until_served(f"{base}/", dashboard)
    wait_for_worker(f"{base}/0/data/workers.json")

    assert listening_addresses(port) == {"127.0.0.1"}  # loopback only by default

    queues_page = rendered_dom(f"{base}/0/view/queues", tmp_path / "profile")
    for queue in names.QUEUES:
        # the queue's name and the link to its failed jobs: drawn by the page's scripts
        assert f"/0/view/jobs/{queue}/failed/" in queues_page, queue
    workers_page = rendered_dom(f"{base}/0/view/workers", tmp_path / "profile")
    assert WORKER_NAME in workers_page
    assert names.QUEUE_EMBED in workers_page
