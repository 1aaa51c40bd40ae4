"""The delivery job against real receivers that misbehave: each POST bounded in time."""

from __future__ import annotations

import socket
import threading
import time

import pytest

from memq import webhooks
from memq.workers.webhooks import deliver


@pytest.mark.parametrize("status", [200, 500])
def test_a_trickling_receiver_is_cut_at_the_delivery_timeout(status: int) -> None:
    """A 200 is taken at its head (the body is not read); an error's body is read to 1 KB
    at most, within the timeout: a receiver trickling it byte by byte is cut there."""
    server = socket.socket()
    server.bind(("127.0.0.1", 0))
    server.listen()

    def trickle() -> None:
        conn, _ = server.accept()
        conn.recv(65536)
        conn.sendall(f"HTTP/1.1 {status} X\r\nContent-Length: 1000\r\n\r\n".encode())
        try:
            for _ in range(20):
                conn.sendall(b"x")
                time.sleep(0.5)
        except OSError:
            pass
        conn.close()
    threading.Thread(target=trickle, daemon=True).start()
    url = f"http://127.0.0.1:{server.getsockname()[1]}/hook"
    started = time.monotonic()
    result = deliver(url, webhooks.new_secret(), [["h:1", "fact.set", "{}"]], 1.0)
    took = time.monotonic() - started  # the trickle would take 10 s
    assert result["outcomes"][0]["ok"] is (status == 200)
    assert took < 5.0, took
