"""``memq dashboard`` in a real headless browser: the page lists memq's queues and a worker,
once the browser has the admin's credentials; a page of another origin cannot make that
browser change anything.

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
from memq.authority import Role
from memq.testing import free_port
from tests.conftest import ROOT, memq_command

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


def opener(url: str, user: str, password: str) -> urllib.request.OpenerDirector:
    """urllib with the admin's credentials for ``url``'s site."""
    passwords = urllib.request.HTTPPasswordMgrWithDefaultRealm()
    passwords.add_password(None, url, user, password)
    return urllib.request.build_opener(urllib.request.HTTPBasicAuthHandler(passwords))


def wait_until_served(url: str, proc: subprocess.Popen[bytes],
                      web: urllib.request.OpenerDirector) -> None:
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            pytest.fail(f"memq dashboard exited with {proc.returncode}")
        try:
            with web.open(url, timeout=2):
                return
        except OSError:
            time.sleep(0.1)
    pytest.fail(f"memq dashboard did not answer at {url}")


def wait_for_worker(url: str, web: urllib.request.OpenerDirector) -> None:
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        with web.open(url, timeout=2) as response:
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
    role_urls: dict[Role, str], role_passwords: dict[Role, str], tmp_path: Path,
    processes: list,
) -> None:
    port = free_port()
    db = ["--db", str(tmp_path / "memq.db")]
    processes.append(subprocess.Popen(
        memq_command("worker", "embed", "--name", WORKER_NAME,
                     "--redis-url", role_urls[Role.WORKER], *db), cwd=ROOT,
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL))
    dashboard = subprocess.Popen(
        memq_command("dashboard", "--port", str(port), "--redis-url", role_urls[Role.ADMIN],
                     *db), cwd=ROOT, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    processes.append(dashboard)
    base = f"http://127.0.0.1:{port}"
    password = role_passwords[Role.ADMIN]
    web = opener(base, "memq-admin", password)
    wait_until_served(f"{base}/", dashboard, web)
    wait_for_worker(f"{base}/0/data/workers.json", web)

    assert listening_addresses(port) == {"127.0.0.1"}  # loopback only by default
    # A browser without the credentials sees nothing of it.
    assert names.QUEUE_EMBED not in rendered_dom(f"{base}/0/view/queues", tmp_path / "stranger")

    # The person's browser, given the credentials once (the URL's, as a login prompt would).
    base = f"http://memq-admin:{password}@127.0.0.1:{port}"
    queues_page = rendered_dom(f"{base}/0/view/queues", tmp_path / "profile")
    for queue in names.QUEUES:
        # the queue's name and the link to its failed jobs: drawn by the page's scripts
        assert f"/0/view/jobs/{queue}/failed/" in queues_page, queue
    workers_page = rendered_dom(f"{base}/0/view/workers", tmp_path / "profile")
    assert WORKER_NAME in workers_page
    assert names.QUEUE_EMBED in workers_page


ATTACK = """<!doctype html><html><body>
<form id="f" method="POST" action="{target}"><input name="x" value="1"></form>
<script>document.getElementById("f").submit();</script>
</body></html>"""


def test_a_page_of_another_origin_cannot_empty_a_queue(
    role_urls: dict[Role, str], role_passwords: dict[Role, str], tmp_path: Path,
    processes: list, redis_url: str,
) -> None:
    """The person's browser, holding the admin's credentials, opens an attacker's page that
    posts a form to the dashboard: the dashboard refuses it, and the queue keeps its job."""
    import functools
    import http.server
    import threading

    import redis

    from memq.jobs import queue

    queue(names.QUEUE_EMBED, redis.Redis.from_url(redis_url)).enqueue(
        "memq.workers.embed.embed_messages", "m", [])
    port = free_port()
    log = tmp_path / "dashboard.log"
    with log.open("w") as sink:
        dashboard = subprocess.Popen(
            memq_command("dashboard", "--port", str(port), "--redis-url",
                         role_urls[Role.ADMIN], "--db", str(tmp_path / "memq.db")),
            cwd=ROOT, stdout=sink, stderr=sink)
    processes.append(dashboard)
    password = role_passwords[Role.ADMIN]
    wait_until_served(f"http://127.0.0.1:{port}/", dashboard,
                      opener(f"http://127.0.0.1:{port}", "memq-admin", password))
    site = tmp_path / "attacker"
    site.mkdir()
    target = f"http://memq-admin:{password}@127.0.0.1:{port}/queue/{names.QUEUE_EMBED}/queued/empty"
    (site / "index.html").write_text(ATTACK.format(target=target))
    handler = functools.partial(http.server.SimpleHTTPRequestHandler, directory=str(site))
    attacker = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    evil_port = attacker.server_address[1]
    threading.Thread(target=attacker.serve_forever, daemon=True).start()
    try:
        rendered_dom(f"http://localhost:{evil_port}/index.html", tmp_path / "victim")
    finally:
        attacker.shutdown()
    assert queue(names.QUEUE_EMBED, redis.Redis.from_url(redis_url)).count == 1
    lines = log.read_text().splitlines()
    posts = [line for line in lines if "POST /queue/" in line]
    assert posts, "the browser did not send the form at all:\n" + "\n".join(lines[-20:])
    # The browser answers the challenge (401) with the credentials, and the form, now
    # authenticated, is refused for coming from another origin (403); nothing else passed.
    assert any(" 403 -" in line for line in posts), posts
    assert all(" 403 -" in line or " 401 -" in line for line in posts), posts
