"""memq's ACL users: their rights on a real Redis, their URLs and files, ``memq acl apply``."""

from __future__ import annotations

import shutil
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
import redis
from hypothesis import example, given, settings
from hypothesis import strategies as st

from memq import acl, names
from memq.authority import Role
from memq.cli import main
from memq.testing import RedisServer, free_port

pytestmark = pytest.mark.redis

AGENT, WORKER, ADMIN = Role.AGENT, Role.WORKER, Role.ADMIN

# (command, agent may, worker may): checked with ACL DRYRUN against the rules as applied.
RIGHTS: list[tuple[tuple[str, ...], bool, bool]] = [
    # No sender but the admin may XADD to a stream the writer reads: it would choose the
    # entry's id. Agents and workers RPUSH to their queue, in a MULTI that reads its count.
    (("XADD", names.INBOX_STREAM, "*", "event", "{}"), False, False),
    (("XADD", names.INBOX_STREAM, "99-1", "event", "{}"), False, False),
    (("XADD", names.WORKER_INBOX_STREAM, "*", "event", "{}"), False, False),
    (("XADD", names.ADMIN_INBOX_STREAM, "*", "event", "{}"), False, False),
    (("RPUSH", names.INBOX_QUEUES[names.INBOX_STREAM], "x"), True, False),
    (("RPUSH", names.INBOX_QUEUES[names.WORKER_INBOX_STREAM], "x"), False, True),
    (("LPUSH", names.INBOX_QUEUES[names.INBOX_STREAM], "x"), False, False),
    (("LINSERT", names.INBOX_QUEUES[names.INBOX_STREAM], "BEFORE", "a", "x"), False, False),
    (("LSET", names.INBOX_QUEUES[names.INBOX_STREAM], "0", "x"), False, False),
    (("LRANGE", names.INBOX_QUEUES[names.INBOX_STREAM], "0", "-1"), False, False),
    # How much others have queued, and when: not an agent's to know.
    (("MEMORY", "USAGE", names.INBOX_QUEUES[names.INBOX_STREAM]), False, False),
    (("OBJECT", "IDLETIME", names.INBOX_QUEUES[names.INBOX_STREAM]), False, False),
    (("DEBUG", "OBJECT", names.INBOX_QUEUES[names.INBOX_STREAM]), False, False),
    (("LPOP", names.INBOX_QUEUES[names.INBOX_STREAM]), False, False),
    (("DEL", names.INBOX_QUEUES[names.INBOX_STREAM]), False, False),
    (("GET", names.RELAYED_KEYS[names.INBOX_STREAM]), True, False),
    (("SET", names.RELAYED_KEYS[names.INBOX_STREAM], "0"), False, False),
    (("INCR", names.RELAYED_KEYS[names.WORKER_INBOX_STREAM]), False, False),
    (("GET", names.COMMITTED_ORDINAL_KEYS[names.INBOX_STREAM]), True, False),
    (("SET", names.COMMITTED_ORDINAL_KEYS[names.INBOX_STREAM], "9-0"), False, False),
    (("GET", names.COMMITTED_ORDINAL_KEYS[names.WORKER_INBOX_STREAM]), False, True),
    (("MULTI",), True, True),
    (("EVAL", "return 1", "0"), False, True),  # RQ's scripts, with the worker's rights
    (("FCALL", "f", "1", names.INBOX_STREAM), False, False),
    (("XADD", names.AGENT_INBOX_STREAM, "*", "prompt", "x"), False, True),
    (("XRANGE", names.INBOX_STREAM, "-", "+"), False, False),
    (("WAIT", "1", "100"), True, True),  # [client] wait_replicas: its own writes only
    (("XRANGE", names.AGENT_INBOX_STREAM, "-", "+"), True, False),
    (("XREADGROUP", "GROUP", "g", "c", "STREAMS", names.AGENT_INBOX_STREAM, ">"), True, False),
    (("XACK", names.AGENT_INBOX_STREAM, "g", "1-0"), True, False),
    (("XAUTOCLAIM", names.AGENT_INBOX_STREAM, "g", "c", "60000", "0-0"), True, False),
    # LASTID would move another agent's group past every future delivery.
    (("XCLAIM", names.AGENT_INBOX_STREAM, "g", "c", "0", "0-0", "LASTID", "99999999999999-0"),
     False, False),
    (("XGROUP", "SETID", names.AGENT_INBOX_STREAM, "g", "99999999999999-0"), False, False),
    (("XSETID", names.AGENT_INBOX_STREAM, "99999999999999-0"), False, False),
    (("XGROUP", "DESTROY", names.AGENT_INBOX_STREAM, "g"), False, False),
    (("DEL", names.AGENT_INBOX_STREAM), False, False),
    (("XTRIM", names.AGENT_INBOX_STREAM, "MAXLEN", "0"), False, False),
    (("GET", names.COMMITTED_KEY), False, False),
    (("SET", names.COMMITTED_KEY, "9-9"), False, False),
    (("HSET", "rq:job:j1", "data", "x"), False, True),
    (("LPUSH", "rq:queue:memq-tasks", "j1"), False, True),
    (("EVALSHA", "0" * 40, "1", "rq:queue:memq-tasks"), False, True),
    (("SUBSCRIBE", "rq:pubsub:worker-1"), False, True),
    (("PUBLISH", "memq:other", "x"), False, False),
    (("SET", "memq:task-fired:t:1", "x"), False, True),
    (("GET", "memq:task-run:t:1"), False, True),
    (("SET", "memq:task-run:t:1", "x"), False, False),
    (("SET", "memq:writer:heartbeat", "x"), False, False),
    (("INFO", "server"), False, True),
    (("CLIENT", "SETNAME", "w"), True, True),
    (("ACL", "WHOAMI"), True, True),
    (("KEYS", "*"), False, False),
    (("SCAN", "0"), False, True),
    (("FLUSHALL",), False, False),
    (("CONFIG", "SET", "appendonly", "no"), False, False),
    (("ACL", "SETUSER", "memq-agent", "+@all"), False, False),
    (("SCRIPT", "FLUSH"), False, False),
    (("FUNCTION", "FLUSH"), False, False),
    (("CLIENT", "KILL", "ID", "1"), False, False),
    (("SHUTDOWN",), False, False),
]


@pytest.fixture
def fresh_redis(tmp_path: Path) -> Iterator[RedisServer]:
    """A Redis of its own: no memq users until a test makes them."""
    with RedisServer(tmp_path) as server:
        yield server


def dry_run(connection: redis.Redis, role: Role, command: tuple[str, ...]) -> bool:
    reply = connection.execute_command("ACL", "DRYRUN", acl.USERNAMES[role], *command)
    return bool(reply == b"OK")


@pytest.mark.parametrize(("command", "agent", "worker"), RIGHTS,
                         ids=[" ".join(c[0][:2]) for c in RIGHTS])
def test_each_role_may_run_exactly_this(
    command: tuple[str, ...], agent: bool, worker: bool, redis_url: str,
    role_passwords: dict[Role, str],
) -> None:
    connection = redis.Redis.from_url(redis_url)
    assert dry_run(connection, AGENT, command) is agent
    assert dry_run(connection, WORKER, command) is worker
    assert dry_run(connection, ADMIN, command) is True


def test_users_log_in_with_their_passwords_only(
    redis_url: str, role_passwords: dict[Role, str]
) -> None:
    for role in Role:
        url = acl.role_url(redis_url, role, role_passwords[role])
        assert acl.role_of(redis.Redis.from_url(url)) is role
        with pytest.raises(redis.exceptions.AuthenticationError):
            redis.Redis.from_url(acl.role_url(redis_url, role, "wrong")).ping()
    assert acl.role_of(redis.Redis.from_url(redis_url)) is ADMIN  # default: one trust domain


class AclFileRedis:
    """redis-server with an ACL file and an append-only file, as ``memq up`` runs it."""

    def __init__(self, directory: Path, acl_path: Path) -> None:
        self.directory, self.acl_path, self.port = directory, acl_path, free_port()
        self.proc: subprocess.Popen[bytes] | None = None

    def start(self) -> None:
        self.proc = subprocess.Popen(
            [shutil.which("redis-server") or "redis-server", "--port", str(self.port),
             "--bind", "127.0.0.1", "--save", "", "--appendonly", "yes", "--appendfsync",
             "always", "--aclfile", str(self.acl_path), "--dir", str(self.directory)],
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)

    def stop(self) -> None:
        if self.proc is not None:
            self.proc.terminate()
            self.proc.wait(10)

    @property
    def base(self) -> str:
        return f"redis://127.0.0.1:{self.port}/0"


def wait_ready(connection: redis.Redis) -> None:
    deadline = time.monotonic() + 10
    while True:
        try:
            connection.ping()
            return
        except redis.exceptions.ConnectionError:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.02)


def test_the_acl_file_holds_the_same_users_and_keeps_transactions(tmp_path: Path) -> None:
    passwords = acl.new_passwords()
    path = tmp_path / "users.acl"
    path.write_text(acl.acl_file(passwords))
    assert passwords[AGENT] not in path.read_text()  # stored as SHA-256 only
    server = AclFileRedis(tmp_path, path)
    server.start()
    try:
        admin = redis.Redis.from_url(acl.role_url(server.base, ADMIN, passwords[ADMIN]))
        wait_ready(admin)
        with pytest.raises(redis.exceptions.AuthenticationError):
            redis.Redis.from_url(server.base).ping()  # nobody logs in as default
        for command, agent, worker in RIGHTS:
            assert dry_run(admin, AGENT, command) is agent, command
            assert dry_run(admin, WORKER, command) is worker, command
        # What the writer's acknowledgement does: a MULTI block, which must survive a restart
        # (a default user without rights would have Redis 7.0 drop it from the AOF).
        pipe = admin.pipeline(transaction=True)
        pipe.set("in-a-transaction", "1")
        pipe.xadd(names.ADMIN_INBOX_STREAM, {"event": "x"})
        pipe.execute()
        server.stop()
        server.start()
        wait_ready(admin)
        assert admin.get("in-a-transaction") == b"1"
        assert admin.xlen(names.ADMIN_INBOX_STREAM) == 1
    finally:
        server.stop()


# -- URLs ---------------------------------------------------------------------------------------


@pytest.mark.parametrize(("base", "expected"), [
    ("redis://127.0.0.1:6379/0", "redis://memq-agent:pw@127.0.0.1:6379/0"),
    ("redis://:old@h:1/2", "redis://memq-agent:pw@h:1/2"),
    ("rediss://u:old@h:1/0?ssl_ca_certs=/ca.pem", "rediss://memq-agent:pw@h:1/0?ssl_ca_certs=%2Fca.pem"),
    ("unix:///tmp/redis.sock?db=0", "unix://memq-agent:pw@/tmp/redis.sock?db=0"),
    ("redis://h:1/0?username=u&password=p&db=3", "redis://memq-agent:pw@h:1/0?db=3"),
])
def test_a_role_url_is_the_base_with_the_roles_credentials(base: str, expected: str) -> None:
    assert acl.role_url(base, AGENT, "pw") == expected
    assert "memq-agent" not in acl.without_credentials(expected)
    assert acl.password_in(expected) == "pw"


@settings(max_examples=100, derandomize=True, database=None)
@given(st.text(min_size=1, max_size=40).filter(lambda t: "\x00" not in t))
@example("p@ss:w/rd?#%")
def test_any_password_survives_the_url(password: str) -> None:
    url = acl.role_url("redis://127.0.0.1:6379/0", WORKER, password)
    parsed = redis.connection.parse_url(url)
    assert (parsed["username"], parsed["password"]) == ("memq-worker", password)
    assert acl.password_in(url) == password


def test_url_files_are_private_and_found_by_role(tmp_path: Path) -> None:
    (tmp_path / "agent.url").write_text("old")
    (tmp_path / "agent.url").chmod(0o644)
    urls = {role: f"redis://{acl.USERNAMES[role]}:p{role.value}@h:1/0" for role in Role}
    acl.write_url_files(tmp_path, urls)
    for role in Role:
        path = tmp_path / acl.URL_FILES[role]
        assert path.stat().st_mode & 0o777 == 0o600
        assert acl.discover_url(str(tmp_path / "memq.db"), role) == urls[role]
    assert acl.saved_passwords(tmp_path) == {role: f"p{role.value}" for role in Role}
    (tmp_path / "worker.url").unlink()
    assert acl.saved_passwords(tmp_path) is None  # all three, or new ones


# -- memq acl apply -----------------------------------------------------------------------------


def apply(server: RedisServer, data: Path, *extra: str, url: str | None = None) -> int:
    return main(["acl", "apply", "--db", str(data / "memq.db"),
                 "--redis-url", url or server.url, *extra])


def test_acl_apply_creates_the_users_and_writes_their_urls(
    fresh_redis: RedisServer, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    data = tmp_path / "data"
    data.mkdir()
    assert acl.trust(redis.Redis.from_url(fresh_redis.url))["one_trust_domain"]
    assert apply(fresh_redis, data) == 0
    out = capsys.readouterr().out
    assert "the default user needs no password" in out
    urls = {role: acl.read_url_file(data, role) for role in Role}
    for role, url in urls.items():
        assert url is not None
        assert acl.role_of(redis.Redis.from_url(url)) is role
        assert (data / acl.URL_FILES[role]).stat().st_mode & 0o777 == 0o600
    trust = acl.trust(redis.Redis.from_url(fresh_redis.url))
    assert trust["users"] == ["memq-admin", "memq-agent", "memq-worker"]
    assert not trust["one_trust_domain"]

    # Again: the same passwords, so processes holding the files go on working ...
    assert apply(fresh_redis, data) == 0
    assert {role: acl.read_url_file(data, role) for role in Role} == urls
    # ... unless asked to rotate them.
    assert apply(fresh_redis, data, "--rotate") == 0
    rotated = {role: acl.read_url_file(data, role) for role in Role}
    assert all(rotated[role] != urls[role] for role in Role)
    with pytest.raises(redis.exceptions.AuthenticationError):
        redis.Redis.from_url(urls[AGENT]).ping()  # type: ignore[arg-type]


def test_acl_apply_needs_admin_credentials(
    fresh_redis: RedisServer, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    data = tmp_path / "data"
    data.mkdir()
    assert apply(fresh_redis, data) == 0
    agent_url = acl.read_url_file(data, AGENT)
    capsys.readouterr()
    assert apply(fresh_redis, data, url=agent_url) == 1
    err = capsys.readouterr().err
    assert err.startswith("memq: error: creating memq's ACL users: the Redis user of "
                          "redis://memq-agent:***@")
    assert len(err.strip().splitlines()) == 1


def test_acl_apply_can_lock_the_default_user(
    fresh_redis: RedisServer, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    data = tmp_path / "data"
    data.mkdir()
    assert apply(fresh_redis, data, "--lock-default") == 0
    assert "default user needs no password" not in capsys.readouterr().out
    with pytest.raises(redis.exceptions.AuthenticationError):
        redis.Redis.from_url(fresh_redis.url).ping()
    admin = redis.Redis.from_url(acl.read_url_file(data, ADMIN))  # type: ignore[arg-type]
    assert acl.trust(admin)["default_user_open"] is False
