"""The shared TLS context still verifies: a server whose certificate no trusted CA signed is
refused, by a client of ``memq serve`` and by a webhook delivery; a caller's own context
(here, trusting the test CA) is used as given."""

from __future__ import annotations

import ssl
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import ClassVar

import pytest

from memq import tls
from memq.errors import BrokerError
from memq.producers.remote import RemoteMemoryClient
from memq.workers.webhooks import deliver
from tests.faults.test_private import make_certs


class Answering(BaseHTTPRequestHandler):
    seen: ClassVar[list[str]] = []

    def do_GET(self) -> None:
        self.seen.append(self.headers.get("Authorization", ""))
        self._answer(b'{"role": "agent"}')

    def do_POST(self) -> None:
        self.rfile.read(int(self.headers["Content-Length"]))
        self.seen.append(self.headers.get("X-Memq-Delivery", ""))
        self._answer(b"{}")

    def _answer(self, body: bytes) -> None:
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args: object) -> None:
        pass


@pytest.fixture(scope="module")
def certs(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    return make_certs(tmp_path_factory.mktemp("certs"))


@pytest.fixture
def https(certs: dict[str, Path]) -> Iterator[str]:
    """An HTTPS server on 127.0.0.1 with a certificate signed by the test CA only."""
    server = ThreadingHTTPServer(("127.0.0.1", 0), Answering)
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.load_cert_chain(certs["cert"], certs["key"])
    server.socket = context.wrap_socket(server.socket, server_side=True)
    Answering.seen = []
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield f"https://127.0.0.1:{server.server_address[1]}"
    server.shutdown()
    server.server_close()


def test_the_default_context_is_built_once_and_verifies() -> None:
    shared = tls.verify(True)
    assert shared is tls.verify(True) is tls.default_context()
    assert shared.verify_mode == ssl.CERT_REQUIRED
    assert shared.check_hostname
    own = ssl.create_default_context()
    assert tls.verify(own) is own
    assert tls.verify(False) is False


def test_a_client_refuses_an_untrusted_server_and_trusts_a_given_ca(
        https: str, certs: dict[str, Path]) -> None:
    with RemoteMemoryClient(https, token="t0ken") as client, \
            pytest.raises(BrokerError, match="CERTIFICATE_VERIFY_FAILED"):
        client.role  # noqa: B018 (the property makes the call)
    assert Answering.seen == []  # no request got through
    trusting = ssl.create_default_context(cafile=str(certs["ca"]))
    with RemoteMemoryClient(https, token="t0ken", verify=trusting) as client:
        assert client.role.value == "agent"
    assert Answering.seen == ["Bearer t0ken"]


def test_a_webhook_is_not_delivered_to_an_untrusted_server(https: str) -> None:
    outcome = deliver(f"{https}/hook", "secret", [["d1", "memory.appended", "{}"]])
    [only] = outcome["outcomes"]
    assert only["ok"] is False
    assert "CERTIFICATE_VERIFY_FAILED" in only["error"]
    assert Answering.seen == []
