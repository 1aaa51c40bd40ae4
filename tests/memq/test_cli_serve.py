"""``memq serve`` as a user runs it: tokens made 0600, each token acting as its role, and a
refusal to start where an agent's token would hold more than the agent's rights."""

from __future__ import annotations

import subprocess
import time
from pathlib import Path

import httpx
import pytest

from memq import acl
from memq.authority import Role
from memq.cli.serve import allowed_hosts
from memq.testing import free_port
from tests.conftest import ROOT, memq_command

pytestmark = pytest.mark.redis


def test_an_agent_token_that_would_be_admin_stops_the_server(redis_url: str,
                                                               tmp_path: Path) -> None:
    done = subprocess.run(memq_command("serve", "--db", str(tmp_path / "memq.db"),
                                       "--redis-url", redis_url, "--port", "0"),
                          capture_output=True, text=True, cwd=ROOT, timeout=60)
    assert done.returncode == 1
    assert "the agent token would act with the admin role's rights" in done.stderr
    assert "Traceback" not in done.stderr


def test_serve_makes_private_tokens_and_each_acts_as_its_role(
    redis_url: str, role_urls: dict[Role, str], tmp_path: Path
) -> None:
    acl.write_url_files(tmp_path, role_urls)  # as `memq up` / `memq acl apply` leave them
    port = free_port()
    proc = subprocess.Popen(memq_command("serve", "--db", str(tmp_path / "memq.db"),
                                         "--port", str(port)),
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, cwd=ROOT)
    try:
        roles = {role: _whoami(port, tmp_path / f"{role.value}.token", proc)
                 for role in (Role.AGENT, Role.ADMIN)}
        assert roles == {Role.AGENT: "agent", Role.ADMIN: "admin"}
        for role in ("agent", "admin"):
            assert (tmp_path / f"{role}.token").stat().st_mode & 0o777 == 0o600
    finally:
        proc.terminate()
        proc.wait(timeout=30)


def _whoami(port: int, token_file: Path, proc: subprocess.Popen[bytes]) -> str:
    for _ in range(600):
        if proc.poll() is not None:
            raise AssertionError(proc.stderr.read() if proc.stderr else b"")
        if token_file.exists():
            try:
                answer = httpx.get(f"http://127.0.0.1:{port}/v1/whoami", headers={
                    "Authorization": f"Bearer {token_file.read_text().strip()}"})
                return str(answer.json()["role"])
            except httpx.ConnectError:
                pass
        time.sleep(0.05)
    raise AssertionError("memq serve did not answer")


def test_the_host_names_served() -> None:
    hosts = allowed_hosts("0.0.0.0", ["api.example.com"])
    assert "api.example.com" in hosts
    assert "0.0.0.0" not in hosts
    assert "10.0.0.5" in allowed_hosts("10.0.0.5", [])
