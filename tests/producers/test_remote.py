"""RemoteMemoryClient against a real ``memq serve``: the local client's results and errors,
its own flushes, and the server's doors (tokens, Host, body size, hostile bodies)."""

from __future__ import annotations

import contextlib
import dataclasses
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from memq import MemoryClient, RemoteMemoryClient
from memq.authority import Role
from memq.config import ClientConfig, Config
from memq.embedding import Embedder
from memq.errors import (
    AuthenticationFailed,
    Busy,
    ConfigError,
    EventsRejected,
    FlushTimeout,
    NotFound,
    PermissionDenied,
    ValidationError,
)
from memq.producers.context import ContextItem
from memq.producers.remote import headers
from memq.server.remotes import Remote
from memq.store.read.messages import Message
from memq.testing import WriterThread, free_port
from tests.embedding_events import send_embeddings
from tests.producers.serving import Served, serving

pytestmark = pytest.mark.redis


@pytest.fixture
def remote(served: Served) -> Iterator[RemoteMemoryClient]:
    with RemoteMemoryClient(served.url, token=served.token()) as client:
        yield client


@pytest.fixture
def admin_remote(served: Served) -> Iterator[RemoteMemoryClient]:
    with RemoteMemoryClient(served.url, token=served.token(Role.ADMIN)) as client:
        yield client


def test_what_a_remote_client_writes_reads_as_the_local_client_reads_it(
    remote: RemoteMemoryClient, client: MemoryClient
) -> None:
    first = remote.append("s", "user", "Book the Lisbon flight", user_id="u1", agent_id="a1")
    remote.append("s", "assistant", "Done: TP 1351 on March 5th", importance=0.9)
    remote.append("s", "tool", "ok", tool_call_id="c1", tool_name="book",
                  tool_calls=[{"id": "c1", "args": {"x": 1}}])
    remote.flush()
    assert remote.history("s") == client.history("s")
    assert all(isinstance(m, Message) for m in remote.history("s"))
    assert remote.history("s", 1, after=first) == client.history("s", 1, after=first)
    items = remote.get_context("s")
    assert items == client.get_context("s")
    assert all(isinstance(i, ContextItem) and isinstance(i.branches, tuple) for i in items)
    assert [s.session_id for s in remote.sessions(user_id="u1")] == ["s"]
    assert remote.role == Role.AGENT


@pytest.mark.model
def test_a_query_finds_by_meaning_through_the_server_as_in_process(
    remote: RemoteMemoryClient, client: MemoryClient, embedder: Embedder
) -> None:
    texts = ["Turn 1: the parser refactor goes on.", "I am allergic to peanuts.",
             "Turn 2: the parser refactor goes on."]
    ids = remote.append_many([{"session_id": "s1", "role": "user", "content": t,
                               "importance": 0.9 if "peanuts" in t else None} for t in texts])
    remote.flush()
    send_embeddings(client, ids, embedder.embed(texts))
    local = client.get_context("s1", query="peanut allergy")
    assert remote.get_context("s1", query="peanut allergy") == local
    found = {item.id: item for item in local}[ids[1]]
    assert found.branches == ("recency", "importance", "semantic")
    assert found.scores["semantic"] > 0.65


def test_append_many_checks_every_turn_before_sending_any(
    remote: RemoteMemoryClient, client: MemoryClient
) -> None:
    ids = remote.append_many([{"session_id": "s", "role": "user", "content": f"turn {i}"}
                              for i in range(5)])
    with pytest.raises(ValidationError, match=r"turns\[1\]: role"):
        remote.append_many([{"session_id": "s", "role": "user", "content": "fine"},
                            {"session_id": "s", "role": "robot", "content": "bad"}])
    remote.flush()
    assert [m.id for m in client.history("s")] == ids


def test_errors_are_raised_as_the_local_client_raises_them(
    remote: RemoteMemoryClient, admin_remote: RemoteMemoryClient
) -> None:
    with pytest.raises(ValidationError, match="role"):
        remote.append("s", "robot", "hello")
    with pytest.raises(ValidationError):
        remote.append("s", "user", 42)  # type: ignore[arg-type]
    with pytest.raises(NotFound):
        remote.task("no-such-task")
    with pytest.raises(PermissionDenied):
        remote.allow_prefix("git status")
    assert admin_remote.allow_prefix("git status") == "git status"
    admin_remote.flush()
    assert remote.is_command_allowed("git status --short")  # the admin's, read back


def test_a_flush_waits_for_and_reports_only_its_own_events(
    config: Config, role_urls: dict[Role, str], tmp_path: Path
) -> None:
    small = dataclasses.replace(config.limits, max_payload_bytes=1500)
    with WriterThread(config.replace(limits=small)), \
            serving(config, role_urls, tmp_path) as served, \
            RemoteMemoryClient(served.url, token=served.token()) as bad, \
            RemoteMemoryClient(served.url, token=served.token()) as good:
        big = bad.append("s", "user", "x" * 2000)
        good.append("s", "user", "fine")
        good.flush()
        with pytest.raises(EventsRejected) as caught:
            bad.flush()
        (rejection,) = caught.value.rejections
        assert rejection.event_type == "message.appended"
        assert "over the 1500" in rejection.reason
        assert big not in [m.id for m in good.history("s")]
        bad.flush()  # reported once


def test_a_flush_is_right_on_another_server_and_after_its_client_was_forgotten(
    config: Config, role_urls: dict[Role, str], tmp_path: Path
) -> None:
    small = dataclasses.replace(config.limits, max_payload_bytes=1500)
    with WriterThread(config.replace(limits=small)), \
            serving(config, role_urls, tmp_path, max_remotes=1) as one, \
            serving(config, role_urls, tmp_path) as two, \
            RemoteMemoryClient(one.url, token=one.token()) as bad, \
            RemoteMemoryClient(one.url, token=one.token()) as other:
        bad.append("s", "user", "x" * 2000)
        other.tasks()  # server one now remembers only `other`
        with pytest.raises(EventsRejected, match="over the 1500"):
            bad.flush()
        big = bad.append("s", "user", "y" * 2000)
        # Behind a balancer: the flush goes to another server, which never saw the append.
        bad.http = httpx.Client(base_url=two.url, headers=headers(two.token(), bad.client_id))
        with pytest.raises(EventsRejected) as caught:
            bad.flush()
        assert [r.event_id for r in caught.value.rejections] != []
        assert big not in [m.id for m in other.history("s")]


def remote_of(client: MemoryClient, places: int | threading.BoundedSemaphore) -> Remote:
    shared = places if isinstance(places, threading.BoundedSemaphore) else \
        threading.BoundedSemaphore(places)
    return Remote(client.with_own_outbox(), client.with_own_outbox(), (shared,))


def test_a_wait_beyond_the_cap_is_refused_and_its_place_comes_back(config: Config) -> None:
    with MemoryClient(config=config) as client:
        places = threading.BoundedSemaphore(1)
        one, other = remote_of(client, places), remote_of(client, places)
        with one.waiting(1.0, None), pytest.raises(Busy), other.waiting(1.0, None):
            pass
        with other.waiting(1.0, None):  # released, also after a refusal
            pass


def test_one_callers_queued_waits_hold_no_place_another_could_use(config: Config) -> None:
    """Its waits run one at a time: one queued behind its running one holds no place among
    the token's, and a third is refused at once."""
    with MemoryClient(config=config) as client:
        places = threading.BoundedSemaphore(2)
        busy, other = remote_of(client, places), remote_of(client, places)
        queued = threading.Thread(target=_wait_quietly, args=(busy, 0.5))
        with busy.waiting(5.0, None):
            queued.start()
            time.sleep(0.1)  # the second wait of `busy` now queues behind the first
            with pytest.raises(Busy, match="this client already has"), busy.waiting(1.0, None):
                pass
            with other.waiting(1.0, None):  # a place is still there for another caller
                pass
        queued.join()


def _wait_quietly(remote: Remote, timeout: float) -> None:
    with contextlib.suppress(FlushTimeout), remote.waiting(timeout, None):
        pass


def test_a_flush_without_a_body_waits_with_its_defaults(served: Served) -> None:
    """As the docs' curl example sends it."""
    auth = {"Authorization": f"Bearer {served.token()}"}
    httpx.post(f"{served.url}/v1/messages", headers=auth,
               json={"session_id": "s", "role": "user", "content": "hi"})
    answer = httpx.post(f"{served.url}/v1/flush", headers=auth)
    assert (answer.status_code, answer.json()) == (200, {"flushed": True})
    history = httpx.get(f"{served.url}/v1/history?session_id=s", headers=auth).json()
    assert [m["content"] for m in history["messages"]] == ["hi"]


def test_a_flush_beyond_what_was_ever_sent_is_refused(
    config: Config, served: Served
) -> None:
    """It would wait its whole timeout, holding a place, for what nobody sent."""
    auth = {"Authorization": f"Bearer {served.token()}"}
    answer = httpx.post(f"{served.url}/v1/flush", headers=auth,
                        json={"timeout": 30, "sent": "999999999999-0"})
    assert answer.status_code == 422
    assert "beyond what was ever sent" in answer.json()["detail"]


def test_a_wait_queued_behind_another_of_its_caller_ends_with_its_own_timeout(
    config: Config
) -> None:
    with MemoryClient(config=config) as client:
        remote = remote_of(client, 2)
        with remote.waiting(300.0, None), pytest.raises(FlushTimeout, match="another flush"), \
                remote.waiting(0.05, None):
            pass
        with remote.waiting(1.0, None) as left:  # its turn came back
            assert 0 < left <= 1.0


def test_a_short_flush_and_the_writes_of_a_client_never_wait_for_its_long_flush(
    config: Config, role_urls: dict[Role, str], tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """One RemoteMemoryClient shared by threads: while one thread's flush waits for a
    writer that is not running, another's flush(0.05) ends with FlushTimeout and its
    appends go through (they used to queue behind the long wait, past the HTTP timeout)."""
    long_wait_began = threading.Event()
    real_flush = MemoryClient.flush

    def flush_noted(self: MemoryClient, timeout: float = 10.0) -> None:
        if timeout > 100:
            long_wait_began.set()
        real_flush(self, timeout)

    monkeypatch.setattr(MemoryClient, "flush", flush_noted)
    with serving(config, role_urls, tmp_path) as served, \
            RemoteMemoryClient(served.url, token=served.token()) as shared:
        first = shared.append("s", "user", "waits for a writer")  # none runs yet
        errors: list[BaseException] = []
        long = threading.Thread(target=_flush_noting_errors, args=(shared, 200, errors))
        long.start()
        assert long_wait_began.wait(60)  # a safety net only: it begins at once
        with pytest.raises(FlushTimeout):
            shared.flush(0.05)
        second = shared.append("s", "user", "sent while the long flush waits")
        assert long.is_alive()  # still waiting: the append did not queue behind it
        with WriterThread(config):
            long.join()
            shared.flush()
        assert errors == []
        assert [m.id for m in shared.history("s")] == [first, second]


def _flush_noting_errors(remote: RemoteMemoryClient, timeout: float,
                         errors: list[BaseException]) -> None:
    try:
        remote.flush(timeout)
    except BaseException as exc:  # reported by the test's assert
        errors.append(exc)


def test_a_key_holding_its_places_leaves_other_keys_and_the_agent_token_theirs(
    config: Config, role_urls: dict[Role, str], tmp_path: Path
) -> None:
    """Keys shared the agent token's places: one key's waiting flushes (or forget waits)
    made every other key's and tenant's flush, and the agent token's, a 503."""
    with serving(config, role_urls, tmp_path, max_waits=2) as served:  # a key: 1 place
        with WriterThread(config), \
                RemoteMemoryClient(served.url, token=served.token(Role.ADMIN)) as admin:
            a, b = (admin.create_key(name, users=[name]).secret for name in ("a", "b"))
            admin.flush(30)
        holder = RemoteMemoryClient(served.url, token=a)
        holder.append("a-chat", "user", "waits for a writer")  # none runs now
        errors: list[BaseException] = []
        waiting = threading.Thread(target=_flush_noting_errors, args=(holder, 60, errors))
        waiting.start()

        def flush(token: str) -> int:
            return httpx.post(f"{served.url}/v1/flush", json={"timeout": 1.0}, timeout=30,
                              headers={"Authorization": f"Bearer {token}",
                                       "Memq-Client-Id": "another"}).status_code

        deadline = time.monotonic() + 30
        while flush(a) == 200 and time.monotonic() < deadline:  # once the holder waits
            time.sleep(0.01)
        assert flush(a) == 503  # the key's own place is taken
        assert flush(b) == 200  # another key's is not
        assert flush(served.token()) == 200  # nor the agent token's
        with WriterThread(config):
            waiting.join()
        assert errors == []
        holder.close()


def test_flushes_beyond_a_tokens_cap_get_503_while_the_admin_still_flushes(
    config: Config, role_urls: dict[Role, str], tmp_path: Path
) -> None:
    with serving(config, role_urls, tmp_path, max_waits=2) as served:
        agents = [RemoteMemoryClient(served.url, token=served.token()) for _ in range(2)]
        for agent in agents:
            agent.append("s", "user", "waits for a writer")  # none runs yet
        errors: list[BaseException] = []

        def flush(agent: RemoteMemoryClient) -> None:
            try:
                agent.flush(60)
            except BaseException as exc:  # reported by the assert below
                errors.append(exc)

        waiting = [threading.Thread(target=flush, args=(a,)) for a in agents]
        for thread in waiting:
            thread.start()
        auth = {"Authorization": f"Bearer {served.token()}"}
        while True:  # a flush with nothing to wait for answers at once, 200 or 503
            busy = httpx.post(f"{served.url}/v1/flush", json={"timeout": 1.0}, headers=auth,
                              timeout=30)
            if busy.status_code != 200:
                break
            time.sleep(0.01)
        assert (busy.status_code, busy.headers["retry-after"]) == (503, "1")
        assert busy.json()["title"] == "Busy"
        with RemoteMemoryClient(served.url, token=served.token(Role.ADMIN)) as admin:
            admin.flush(1)  # another token's places
        with WriterThread(config):
            for thread in waiting:
                thread.join()
        assert errors == []
        for agent in agents:
            agent.close()


def test_no_token_or_a_wrong_one_is_refused(served: Served) -> None:
    answer = httpx.post(f"{served.url}/v1/messages",
                        json={"session_id": "s", "role": "user", "content": "hi"})
    assert answer.status_code == 401
    assert answer.headers["www-authenticate"].startswith("Bearer")
    assert answer.headers["content-type"] == "application/problem+json"
    assert answer.json()["title"] == "AuthenticationFailed"
    with RemoteMemoryClient(served.url, token="x" * 43) as wrong, \
            pytest.raises(AuthenticationFailed):
        wrong.history("s")


def test_an_agent_token_cannot_do_what_the_agent_role_cannot(remote: RemoteMemoryClient
                                                             ) -> None:
    for forbidden in (lambda: remote.allow_prefix("rm -rf"),
                      lambda: remote.set_fact("user", "name", "M", source="user"),
                      lambda: remote.schedule_task("x", "every minute", "p", trusted=True),
                      lambda: remote.forget_user("u1")):
        with pytest.raises(PermissionDenied):
            forbidden()


def test_a_foreign_host_name_and_a_huge_body_are_refused(
    config: Config, role_urls: dict[Role, str], writer: WriterThread, tmp_path: Path
) -> None:
    with serving(config, role_urls, tmp_path, max_body_bytes=4096) as served:
        auth = {"Authorization": f"Bearer {served.token()}"}
        rebound = httpx.get(f"{served.url}/v1/tasks", headers={**auth, "Host": "evil.example"})
        assert rebound.status_code == 421
        huge = httpx.post(f"{served.url}/v1/messages", headers=auth,
                          json={"session_id": "s", "role": "user", "content": "x" * 5000})
        assert huge.status_code == 413
        assert huge.json()["title"] == "ValidationError"

        def chunks() -> Iterator[bytes]:  # no Content-Length: counted as it arrives
            yield b'{"session_id": "s", "role": "user", "content": "'
            yield b"x" * 5000
            yield b'"}'

        streamed = httpx.post(f"{served.url}/v1/messages", headers=auth, content=chunks())
        assert streamed.status_code == 413


def test_the_server_never_takes_trusted_from_the_caller(
    served: Served, remote: RemoteMemoryClient
) -> None:
    """Whether a command comes from a trusted task is the runner's to know: a body that
    claims it is refused, and the answer is the approvals' alone."""
    auth = {"Authorization": f"Bearer {served.token()}"}
    claimed = httpx.post(f"{served.url}/v1/commands/check", headers=auth,
                         json={"command": "rm -rf /", "trusted": True})
    assert claimed.status_code == 422
    asked = httpx.post(f"{served.url}/v1/commands/check", headers=auth,
                       json={"command": "rm -rf /"})
    assert asked.json() == {"allowed": False}
    assert remote.is_command_allowed("rm -rf /", trusted=True) is True  # the runner's call
    assert remote.is_command_allowed("rm -rf /") is False


def test_the_schema_and_its_docs_are_served(served: Served) -> None:
    schema = httpx.get(f"{served.url}/openapi.json").json()
    assert {"/v1/messages", "/v1/messages/batch", "/v1/flush", "/v1/context",
            "/v1/forget/session", "/v1/forget/message"} <= set(schema["paths"])
    for page in ("/docs", "/redoc"):  # their scripts would come from a CDN
        assert httpx.get(f"{served.url}{page}").status_code == 404
    missing = httpx.get(f"{served.url}/v1/nothing-here",
                        headers={"Authorization": f"Bearer {served.token()}"})
    assert (missing.status_code, missing.json()["title"]) == (404, "NotFound")


JSON = st.recursive(
    st.none() | st.booleans() | st.integers() | st.text()
    | st.floats(allow_nan=False, allow_infinity=False),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=8), inner,
                                                                  max_size=4),
    max_leaves=12,
)
TURN_FIELDS = st.fixed_dictionaries({}, optional={
    "session_id": JSON, "role": st.sampled_from(["user", "tool", "x"]) | JSON,
    "content": JSON, "importance": JSON, "tool_calls": JSON, "created_at": JSON,
    "user_id": JSON, "extra": JSON})
PATHS = ["/v1/messages", "/v1/messages/batch", "/v1/context", "/v1/facts", "/v1/tasks",
         "/v1/flush", "/v1/tool-calls", "/v1/commands/check", "/v1/forget/session",
         "/v1/forget/message"]


HOSTILE_RAW = [
    b'{"session_id": "s", "role": "user", "content": "x", "importance": NaN}',
    b"[" * 100_000,
    b'{"messages": [' + b"{}," * 5000 + b"{}]}",
]


@settings(max_examples=60, deadline=None, derandomize=True,
          suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(path=st.sampled_from(PATHS), body=TURN_FIELDS | JSON,
       raw=st.none() | st.binary() | st.sampled_from(HOSTILE_RAW))
def test_hostile_bodies_get_a_problem_never_a_fault(
    served: Served, path: str, body: object, raw: bytes | None
) -> None:
    auth = {"Authorization": f"Bearer {served.token()}", "Content-Type": "application/json"}
    if raw is None:
        answer = httpx.post(served.url + path, headers=auth, json=body)
    else:
        answer = httpx.post(served.url + path, headers=auth, content=raw)
    assert answer.status_code < 500, answer.text
    if answer.status_code >= 400:
        assert answer.headers["content-type"] == "application/problem+json"
        assert answer.json()["title"] in {"ValidationError", "NotFound", "PermissionDenied",
                                          "ScheduleError", "InvalidEvent"}



ODD_IDS = st.text(max_size=300) | st.sampled_from(
    ["", " ", "\x00", "\x1b[31m", "\x85", "a" * 201, "\U0001f600" * 201])


@settings(max_examples=40, deadline=None, derandomize=True,
          suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(session_id=ODD_IDS, message_id=ODD_IDS | st.sampled_from(["\\ud800", '\\"']))
def test_forgetting_a_message_by_an_odd_id_gets_a_problem_or_an_event(
    served: Served, session_id: str, message_id: str
) -> None:
    """Any text, even one JSON escapes as a lone surrogate: a forget is written or refused
    as a problem, never a fault of the server."""
    auth = {"Authorization": f"Bearer {served.token()}", "Content-Type": "application/json"}
    # The message id goes in unescaped: a backslash in it may make any JSON escape.
    session = session_id.encode("unicode_escape").decode().replace('"', '\\"')
    raw = f'{{"session_id": "{session}", "message_id": "{message_id}"}}'.encode()
    answer = httpx.post(f"{served.url}/v1/forget/message", headers=auth, content=raw)
    assert answer.status_code < 500, answer.text
    if answer.status_code >= 400:
        assert answer.headers["content-type"] == "application/problem+json"
        assert answer.json()["title"] in {"ValidationError", "InvalidEvent"}
    else:
        assert answer.json()["event_id"]

def test_two_servers_serve_one_database_with_the_same_tokens(
    config: Config, role_urls: dict[Role, str], writer: WriterThread, tmp_path: Path
) -> None:
    with serving(config, role_urls, tmp_path) as one, serving(config, role_urls, tmp_path) as two:
        assert one.tokens == two.tokens  # made once, in the data directory
        with RemoteMemoryClient(one.url, token=one.token()) as first, \
                RemoteMemoryClient(two.url, token=two.token()) as second:
            sent = first.append("s", "user", "written through one server")
            first.flush()
            assert [m.id for m in second.history("s")] == [sent]
            assert [i.id for i in second.get_context("s")] == [sent]


def test_a_malformed_client_id_is_refused(served: Served) -> None:
    answer = httpx.get(f"{served.url}/v1/tasks", headers={
        "Authorization": f"Bearer {served.token()}", "Memq-Client-Id": "../" * 30})
    assert (answer.status_code, answer.json()["title"]) == (422, "ValidationError")


def test_an_error_of_the_servers_own_parts_names_none_of_them(
    config: Config, tmp_path: Path
) -> None:
    """A caller learns what kind of trouble it is, never the broker's address, its user or
    the server's paths (the server's log has them)."""
    dead = f"redis://memq-agent:hunter2@127.0.0.1:{free_port()}/0"
    broken = config.replace(redis_url=dead, client=ClientConfig(retry_for_s=0.1))
    with serving(broken, dict.fromkeys(Role, dead), tmp_path) as served:
        answer = httpx.post(f"{served.url}/v1/messages",
                            headers={"Authorization": f"Bearer {served.token()}"},
                            json={"session_id": "s", "role": "user", "content": "x"})
    body = answer.json()
    assert answer.status_code >= 500
    assert body["title"] == "BrokerError"
    assert "cannot reach its broker" in body["detail"]
    for secret in ("redis://", "127.0.0.1", "memq-agent", "hunter2", str(tmp_path)):
        assert secret not in answer.text


@pytest.mark.parametrize("url", ["http://x:abc", "http://[::1"])
def test_an_address_httpx_cannot_read_is_a_config_error(url: str) -> None:
    """It once came out of the first call as httpx's InvalidURL, and `memq export --server`
    printed a traceback."""
    from memq.producers.remote_async import AsyncRemoteMemoryClient

    for client in (RemoteMemoryClient, AsyncRemoteMemoryClient):
        with pytest.raises(ConfigError, match=r"not a server address: .*Invalid port"):
            client(url, token="t")
