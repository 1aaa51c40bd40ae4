"""Webhooks end to end: a real writer, the dispatcher, an RQ worker of ``memq-webhooks``
and real HTTP receivers (one that fails, one that hangs, one that redirects)."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import apsw
import orjson
import pytest
import redis

from memq import MemoryClient, names, webhooks
from memq.config import Config
from memq.store.dispatch.webhooks import Dispatcher, outcomes
from memq.store.read.webhooks import active_with_secrets
from memq.testing import WriterThread
from memq.workers.queues import worker

pytestmark = pytest.mark.redis


@dataclass
class Receiver:
    """A local HTTP server: what it was sent, and how it answers (``answers`` in turn)."""

    answers: list[int] = field(default_factory=lambda: [200])
    hang_s: float = 0.0
    got: list[tuple[dict[str, str], bytes]] = field(default_factory=list)
    url: str = ""

    def handler(self) -> type[BaseHTTPRequestHandler]:
        receiver = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                body = self.rfile.read(int(self.headers["Content-Length"]))
                receiver.got.append((dict(self.headers), body))
                time.sleep(receiver.hang_s)
                status = receiver.answers.pop(0) if len(receiver.answers) > 1 \
                    else receiver.answers[0]
                self.send_response(status)
                if status in (301, 302, 307):
                    self.send_header("Location", "http://169.254.169.254/latest")
                self.end_headers()

            def log_message(self, *args: object) -> None:
                pass
        return Handler


@pytest.fixture
def receivers() -> Iterator[Callable[..., Receiver]]:
    servers: list[ThreadingHTTPServer] = []

    def start(**how: object) -> Receiver:
        receiver = Receiver(**how)  # type: ignore[arg-type]
        server = ThreadingHTTPServer(("127.0.0.1", 0), receiver.handler())
        server.daemon_threads = True
        threading.Thread(target=server.serve_forever, daemon=True).start()
        servers.append(server)
        receiver.url = f"http://127.0.0.1:{server.server_address[1]}/hook"
        return receiver
    yield start
    for server in servers:
        server.shutdown()


@pytest.fixture
def deliveries(config: Config, writer: WriterThread) -> Iterator[Callable[..., None]]:
    """``run(until)``: the dispatcher and a burst worker in turn until ``until()``."""
    conn = apsw.Connection(config.db_path, flags=apsw.SQLITE_OPEN_READONLY)
    connection = redis.Redis.from_url(config.redis_url)
    dispatcher = Dispatcher(conn, connection, timeout_s=1.0)
    deliverer = worker([names.QUEUE_WEBHOOKS], connection)

    def run(until: Callable[[], bool], *, now: Callable[[], float] = time.time,
            turns: int = 200) -> None:
        for _ in range(turns):  # a bound, not a timing: each turn does a step of work
            dispatcher.tick(now())
            deliverer.work(burst=True, with_scheduler=False)
            dispatcher.tick(now())
            if until():
                return
        raise AssertionError(f"the deliveries did not get there in {turns} turns")
    yield run
    conn.close()


def test_every_matching_change_arrives_signed_in_order(
        client: MemoryClient, receivers: Callable[..., Receiver],
        deliveries: Callable[..., None]) -> None:
    receiver = receivers()
    hook = client.add_webhook(receiver.url, types=["fact.*", "message.appended"],
                              user_id="alice")
    client.flush()
    client.append("s1", "user", "hello", user_id="alice")
    client.append("s2", "user", "bob's", user_id="bob")
    client.set_fact("home", "city", "Porto", user_id="alice")
    client.create_key("k", users=["alice"])  # never sent to a webhook
    client.flush()
    deliveries(lambda: len(receiver.got) >= 2)
    kinds = [orjson.loads(body)["type"] for _, body in receiver.got]
    assert kinds == ["message.appended", "fact.set"]
    for headers, body in receiver.got:
        assert webhooks.verify(hook.secret, body, headers[webhooks.SIGNATURE_HEADER])
        assert not webhooks.verify(hook.secret, body + b" ", headers[webhooks.SIGNATURE_HEADER])
        change = orjson.loads(body)
        assert headers[webhooks.DELIVERY_HEADER] == f"{hook.id}:{change['position']}"
        assert change["user_id"] == "alice"


def test_a_receiver_failing_ten_times_gets_the_delivery_after_backing_off(
        client: MemoryClient, receivers: Callable[..., Receiver],
        deliveries: Callable[..., None], config: Config) -> None:
    receiver = receivers(answers=[500] * 10 + [200])
    hook = client.add_webhook(receiver.url, types=["message.appended"])
    client.flush()
    client.append("s1", "user", "hello")
    client.flush()
    clock = [time.time()]

    def later() -> float:  # each turn a backoff's worth later: the retries come due
        clock[0] += max(webhooks.BACKOFF_S) + 1
        return clock[0]
    deliveries(lambda: len(receiver.got) == 11, now=later)
    ids = {headers[webhooks.DELIVERY_HEADER] for headers, _ in receiver.got}
    assert len(ids) == 1  # the same delivery id every time: a receiver deduplicates on it
    seen = outcomes(redis.Redis.from_url(config.redis_url), hook.id)
    assert [(o["ok"], o["status"]) for o in reversed(seen)] == [(False, 500)] * 10 + [
        (True, 200)]


def test_a_hanging_receiver_delays_no_other_webhook_and_a_redirect_is_not_followed(
        client: MemoryClient, receivers: Callable[..., Receiver],
        deliveries: Callable[..., None], config: Config) -> None:
    hanging, healthy, moved = receivers(hang_s=3.0), receivers(), receivers(answers=[302])
    slow = client.add_webhook(hanging.url, types=["message.appended"])
    client.add_webhook(healthy.url, types=["message.appended"])
    redirected = client.add_webhook(moved.url, types=["message.appended"])
    client.flush()
    for i in range(5):
        client.append("s1", "user", f"turn {i}")
    client.flush()
    deliveries(lambda: len(healthy.got) == 5 and len(moved.got) >= 1)
    # One delivery at a time, each cut at its timeout and retried after a backoff.
    assert len(hanging.got) < len(healthy.got)
    connection = redis.Redis.from_url(config.redis_url)
    assert [o["ok"] for o in outcomes(connection, slow.id)] == [False] * len(
        outcomes(connection, slow.id))
    [first] = outcomes(connection, redirected.id)[-1:]
    assert (first["ok"], first["status"]) == (False, 302)
    assert "not followed" in first["error"]


def one_delivered(client: MemoryClient, receivers: Callable[..., Receiver],
                  deliveries: Callable[..., None]) -> tuple[Receiver, str]:
    """A webhook of every change, and its receiver once it got the first: (receiver, id)."""
    receiver = receivers()
    hook = client.add_webhook(receiver.url, types=["*"])
    client.flush()
    client.append("s1", "user", "one")
    client.flush()
    deliveries(lambda: len(receiver.got) == 1)
    return receiver, hook.id


def test_a_removed_webhook_is_sent_nothing_more(
        client: MemoryClient, receivers: Callable[..., Receiver],
        deliveries: Callable[..., None]) -> None:
    receiver, hook_id = one_delivered(client, receivers, deliveries)
    client.remove_webhook(hook_id)
    client.append("s1", "user", "two")
    client.flush()
    with pytest.raises(AssertionError, match="4 turns"):
        deliveries(lambda: len(receiver.got) > 1, turns=4)
    assert [h.removed_at is not None for h in client.webhooks()] == [True]


def test_a_removed_webhook_leaves_nothing_in_redis(
        client: MemoryClient, config: Config, receivers: Callable[..., Receiver],
        deliveries: Callable[..., None]) -> None:
    """Its state, its outcomes, and its delivery job still queued (which holds its secret
    and the changes' data) go once it is removed."""
    receiver, hook_id = one_delivered(client, receivers, deliveries)
    connection = redis.Redis.from_url(config.redis_url)
    conn = apsw.Connection(config.db_path, flags=apsw.SQLITE_OPEN_READONLY)
    dispatcher = Dispatcher(conn, connection, timeout_s=1.0)
    client.append("s1", "user", "two")
    client.flush()
    dispatcher.tick()  # a delivery job queued, not yet run
    secret = next(h.secret for h in active_with_secrets(conn))
    held = list(connection.scan_iter(match=f"*{hook_id}*"))
    assert held, "the webhook's state and job are in Redis"
    client.remove_webhook(hook_id)
    client.flush()
    dispatcher.tick()
    conn.close()
    assert list(connection.scan_iter(match=f"*{hook_id}*")) == []
    assert not any(secret.encode() in (connection.dump(k) or b"")
                   for k in connection.scan_iter(count=1000))
    assert len(receiver.got) == 1


def test_a_slow_receiver_gets_a_long_backlog_in_jobs_of_a_bounded_time_each_once(
        client: MemoryClient, receivers: Callable[..., Receiver],
        deliveries: Callable[..., None], config: Config,
        monkeypatch: pytest.MonkeyPatch) -> None:
    """Each POST answered 200 after 0.3 s (inside the 1 s timeout): a job stops starting
    POSTs once its budget is spent and the next goes on; none is failed or sent again."""
    monkeypatch.setattr(webhooks, "BUDGET_S", 0.5)
    receiver = receivers(hang_s=0.3)
    hook = client.add_webhook(receiver.url, types=["message.appended"])
    client.flush()
    for i in range(8):
        client.append("s1", "user", f"turn {i}")
    client.flush()
    deliveries(lambda: len(receiver.got) >= 8)
    seen = outcomes(redis.Redis.from_url(config.redis_url), hook.id)
    assert len(receiver.got) == 8  # each once
    assert [o for o in seen if not o["ok"]] == [], [(o["position"], o["error"]) for o in seen]


def test_a_tenants_webhook_gets_its_tenants_changes_in_its_own_names(
        client: MemoryClient, receivers: Callable[..., Receiver],
        deliveries: Callable[..., None]) -> None:
    receiver = receivers()
    client.add_webhook(receiver.url, types=["message.appended", "fact.*", "prefix.*"],
                       tenant="acme")
    client.flush()
    client.append("acme\x1fs1", "user", "acme's turn", user_id="acme\x1falice")
    client.append("s1", "user", "the default tenant's turn", user_id="alice")
    client.set_fact("house", "rule", "acme's global rule", user_id="acme\x1f")
    client.set_fact("house", "rule", "the default tenant's rule")
    client.allow_prefix("npm test", tenant="acme")
    client.allow_prefix("git status")
    client.flush()
    deliveries(lambda: len(receiver.got) >= 3)
    got = [orjson.loads(body) for _, body in receiver.got]
    assert [(c["type"], c["session_id"], c["user_id"]) for c in got] == [
        ("message.appended", "s1", "alice"), ("fact.set", None, None),
        ("prefix.allowed", None, None)]
    assert [c["data"].get("user_id") for c in got[:2]] == ["alice", None]
    assert "default tenant" not in repr(got)
