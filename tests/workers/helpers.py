"""Test helpers for the consolidation tests: a local chat-completions endpoint, a burst
worker in the test process, and waiting for the writer to catch up with the inbox."""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import orjson

from memq import MemoryClient, names
from memq.config import Config
from memq.store.dispatch.consolidation_jobs import wait_planned
from memq.testing import run_queued_jobs
from memq.workers.consolidate import request_event

OLD = datetime.now(UTC) - timedelta(days=3)

Reply = tuple[int, bytes]


def completion(content: str) -> Reply:
    """A well-formed chat completion whose message says ``content``."""
    body = {"id": "c1", "object": "chat.completion", "model": "fast",
            "choices": [{"index": 0, "finish_reason": "stop",
                         "message": {"role": "assistant", "content": content}}]}
    return 200, orjson.dumps(body)


class ChatServer:
    """An OpenAI-compatible ``/v1/chat/completions`` endpoint on a free local port.

    ``reply`` decides each answer from the request body; ``hang()`` makes the server hold
    requests until ``release()`` (a model that does not answer).
    """

    def __init__(self) -> None:
        self.requests: list[dict[str, Any]] = []
        self.reply: Callable[[dict[str, Any]], Reply] = lambda body: completion("ok")
        self.received = threading.Event()
        self._release = threading.Event()
        self._release.set()
        self.server = ThreadingHTTPServer(("127.0.0.1", 0), self._handler())
        self.server.daemon_threads = True
        self.thread = threading.Thread(target=self.server.serve_forever, args=(0.02,),
                                       daemon=True)

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.server.server_address[1]}/v1"

    def hang(self) -> None:
        self._release.clear()

    def release(self) -> None:
        self._release.set()

    def __enter__(self) -> ChatServer:
        self.thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.release()
        self.server.shutdown()
        self.server.server_close()

    def _handler(self) -> type[BaseHTTPRequestHandler]:
        outer = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                size = int(self.headers.get("Content-Length", 0))
                body = orjson.loads(self.rfile.read(size))
                outer.requests.append({"path": self.path, "headers": dict(self.headers),
                                       "body": body})
                outer.received.set()
                outer._release.wait(30)
                status, payload = outer.reply(body)
                # A caller that gave up on a held reply (a timeout's test) has gone: not an
                # error of the server's, and not a traceback in the test log.
                with contextlib.suppress(BrokenPipeError, ConnectionResetError):
                    self.send_response(status)
                    self.send_header("Content-Type", "application/json")
                    self.send_header("Content-Length", str(len(payload)))
                    self.end_headers()
                    self.wfile.write(payload)

            def log_message(self, *args: Any) -> None:
                pass

        return Handler


def run_burst_worker(config: Config, logging_level: str = "INFO") -> None:
    """Run every queued consolidate job in this process, then wait for the writer."""
    run_queued_jobs(config, names.QUEUE_CONSOLIDATE, logging_level=logging_level)


def request_pass(client: MemoryClient, **kwargs: Any) -> dict[str, int]:
    """Send a consolidation request and wait until the writer has planned it."""
    event = request_event(**kwargs)
    client.outbox.send(event)
    return wait_planned(client.redis, event.id, 10)


def append_turns(client: MemoryClient, session: str, texts: list[str],
                 start: datetime = OLD, user_id: str | None = None) -> list[str]:
    ids = [
        client.append(session, "user" if i % 2 == 0 else "assistant", text,
                      created_at=start + timedelta(minutes=i), user_id=user_id)
        for i, text in enumerate(texts)
    ]
    client.flush()
    return ids
