"""What stands in front of rq-dashboard, with real HTTP requests to a real ``memq dashboard``:
the admin's credentials, the Host allow-list, and no cross-origin change."""

from __future__ import annotations

import base64
import http.client
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
import redis

from memq import names
from memq.authority import Role
from memq.cli.dashboard_guard import Credentials, Guard, host_name
from memq.jobs import queue
from memq.testing import free_port
from tests.conftest import ROOT, memq_command

pytestmark = pytest.mark.redis

EMPTY = f"/queue/{names.QUEUE_EMBED}/queued/empty"


class Dashboard:
    def __init__(self, port: int, user: str, password: str) -> None:
        self.port, self.user, self.password = port, user, password

    @property
    def origin(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def request(self, method: str, path: str, *, auth: tuple[str, str] | None = None,
                **headers: str) -> tuple[int, dict[str, str], bytes]:
        user, password = auth or (self.user, self.password)
        token = base64.b64encode(f"{user}:{password}".encode()).decode()
        sent = {"Authorization": f"Basic {token}", **headers}
        if auth == ("", ""):
            del sent["Authorization"]
        connection = http.client.HTTPConnection("127.0.0.1", self.port, timeout=10)
        try:
            # Host is whatever the test says (a rebound name, say), not the address used.
            connection.putrequest(method, path, skip_host=True)
            connection.putheader("Host", sent.pop("Host", f"127.0.0.1:{self.port}"))
            for name, value in sent.items():
                connection.putheader(name.replace("_", "-"), value)
            connection.endheaders()
            response = connection.getresponse()
            return response.status, dict(response.getheaders()), response.read()
        finally:
            connection.close()


def serve(redis_url: str, db: Path, *extra: str) -> tuple[subprocess.Popen[bytes], int]:
    port = free_port()
    proc = subprocess.Popen(
        memq_command("dashboard", "--port", str(port), "--redis-url", redis_url,
                     "--db", str(db), *extra),
        cwd=ROOT, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        try:
            http.client.HTTPConnection("127.0.0.1", port, timeout=1).connect()
            return proc, port
        except OSError:
            if proc.poll() is not None:
                pytest.fail(f"memq dashboard exited with {proc.returncode}")
            time.sleep(0.1)
    proc.kill()
    pytest.fail("memq dashboard did not listen")


@pytest.fixture
def dashboard(role_urls: dict[Role, str], role_passwords: dict[Role, str],
              tmp_path: Path) -> Iterator[Dashboard]:
    proc, port = serve(role_urls[Role.ADMIN], tmp_path / "memq.db", "--allow-host", "memq.lan")
    try:
        yield Dashboard(port, "memq-admin", role_passwords[Role.ADMIN])
    finally:
        proc.terminate()
        proc.wait(20)


def queued(redis_url: str) -> int:
    return int(queue(names.QUEUE_EMBED, redis.Redis.from_url(redis_url)).count)


def enqueue_one(redis_url: str) -> None:
    queue(names.QUEUE_EMBED, redis.Redis.from_url(redis_url)).enqueue(
        "memq.workers.embed.embed_messages", "m", [])


def test_the_admins_credentials_are_needed(dashboard: Dashboard) -> None:
    status, headers, _ = dashboard.request("GET", "/", auth=("", ""))
    assert status == 401
    assert headers["WWW-Authenticate"].startswith('Basic realm="memq dashboard"')
    assert dashboard.request("GET", "/", auth=("memq-admin", "wrong"))[0] == 401
    assert dashboard.request("GET", "/", auth=("memq-agent", dashboard.password))[0] == 401
    assert dashboard.request("GET", "/0/data/queues.json", auth=("", ""))[0] == 401
    status, _, body = dashboard.request("GET", "/0/data/queues.json")
    assert status == 200
    assert names.QUEUE_EMBED.encode() in body


HOSTS = [
    ("127.0.0.1:{port}", True), ("localhost:{port}", True), ("[::1]:{port}", True),
    ("memq.lan", True), ("MEMQ.LAN:{port}", True),
    ("attacker.example:{port}", False), ("127.0.0.1.attacker.example", False), ("", False),
]


def test_only_allowed_host_names_are_served(dashboard: Dashboard) -> None:
    # One dashboard for every Host header: a process each cost a second of CPU apiece.
    for host, served in HOSTS:
        status, _, _ = dashboard.request("GET", "/0/data/queues.json",
                                         Host=host.format(port=dashboard.port))
        assert status == (200 if served else 421), host


def test_a_change_must_come_from_the_dashboards_own_page(
    dashboard: Dashboard, redis_url: str
) -> None:
    enqueue_one(redis_url)
    for headers in ({}, {"Origin": "http://attacker.example"},
                    {"Origin": "null"},
                    {"Referer": "http://attacker.example/page.html"},
                    {"Origin": dashboard.origin, "Sec-Fetch-Site": "cross-site"},
                    {"Origin": dashboard.origin.replace("127.0.0.1", "localhost")}):
        status, _, body = dashboard.request("POST", EMPTY, **headers)
        assert status == 403, headers
        assert b"own page" in body
    assert queued(redis_url) == 1
    # rq-dashboard's "requeue all" answers GET too: it is a change all the same
    assert dashboard.request("GET", f"/requeue/{names.QUEUE_EMBED}")[0] == 403
    status, _, _ = dashboard.request("POST", EMPTY, Origin=dashboard.origin,
                                     Sec_Fetch_Site="same-origin")
    assert status == 200
    assert queued(redis_url) == 0
    enqueue_one(redis_url)
    referred = dashboard.request("POST", EMPTY, Referer=f"{dashboard.origin}/0/view/queues")
    assert referred[0] == 200
    assert queued(redis_url) == 0


def test_a_url_without_a_password_gets_one_made_for_the_run(
    redis_url: str, tmp_path: Path
) -> None:
    proc, port = serve(redis_url, tmp_path / "memq.db")
    try:
        path = tmp_path / "dashboard.password"
        deadline = time.monotonic() + 10
        while not path.exists() and time.monotonic() < deadline:
            time.sleep(0.05)
        assert path.stat().st_mode & 0o777 == 0o600
        dashboard = Dashboard(port, "default", path.read_text().strip())
        assert dashboard.request("GET", "/0/data/queues.json")[0] == 200
        assert dashboard.request("GET", "/0/data/queues.json", auth=("default", ""))[0] == 401
    finally:
        proc.terminate()
        proc.wait(20)


# -- the middleware alone --------------------------------------------------------------------


def test_a_refusal_never_reaches_the_app() -> None:
    reached = []

    def app(environ: dict, start_response: object) -> list[bytes]:
        reached.append(environ["PATH_INFO"])
        return [b"ok"]

    guard = Guard(app, Credentials("memq-admin", "pw"), {"127.0.0.1"})
    statuses = []
    environ = {"HTTP_HOST": "evil:1", "REQUEST_METHOD": "GET", "PATH_INFO": "/x"}
    guard(environ, lambda status, headers: statuses.append(status))
    assert statuses == ["421 Misdirected Request"]
    assert reached == []


@pytest.mark.parametrize(("header", "name"), [
    ("127.0.0.1:9181", "127.0.0.1"), ("LOCALHOST", "localhost"), ("[::1]:9181", "::1"),
    ("[::1]", "::1"), ("::1", "::1"), ("memq.lan:80", "memq.lan"), ("", ""),
])
def test_host_names(header: str, name: str) -> None:
    assert host_name(header) == name


@pytest.mark.parametrize("header", [
    None, "", "Bearer pw", "Basic", "Basic !!!",
    "Basic " + base64.b64encode(b"memq-admin").decode(),
    "Basic " + base64.b64encode(b"memq-admin:pw2").decode(),
    "Basic " + base64.b64encode(b"memq-admi:pw").decode(),
    "Basic " + base64.b64encode("memq-admin:pw\u00e9".encode()).decode(),
    "Basic " + base64.b64encode(b"\xff:\xfe").decode(),
])
def test_only_the_exact_credentials_match(header: str | None) -> None:
    assert not Credentials("memq-admin", "pw").match(header)
    good = "basic " + base64.b64encode(b"memq-admin:pw").decode()
    assert Credentials("memq-admin", "pw").match(good)
