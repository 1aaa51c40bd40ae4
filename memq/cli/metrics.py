"""``memq metrics``: serve Prometheus metrics over HTTP (stdlib ``http.server``).

Each scrape of ``/metrics`` reads the same sources as ``memq status`` plus the writer's
figures hash; the metric names are listed in :mod:`memq.metrics`. Bound to 127.0.0.1
unless told otherwise: the figures describe private conversations' volume.
"""

from __future__ import annotations

import argparse
import logging
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from memq import broker, logs, metrics, names
from memq.cli.common import add_store_options, load_config, port
from memq.cli.status import collect
from memq.config import Config
from memq.errors import BrokerError, MemqError
from memq.metrics import Family

logger = logging.getLogger("memq.metrics")


def register(sub: Any) -> None:
    parser = sub.add_parser("metrics", help="serve Prometheus metrics on /metrics")
    add_store_options(parser)
    parser.add_argument("--host", help="address to bind (default: [ops] metrics_host, 127.0.0.1)")
    parser.add_argument("--port", type=port, help="port (default: [ops] metrics_port, 9464)")
    parser.set_defaults(func=serve_metrics)


def serve_metrics(args: argparse.Namespace) -> int:
    logs.setup()
    config = load_config(args)
    host = args.host or config.ops.metrics_host
    port = config.ops.metrics_port if args.port is None else args.port
    server = make_server(config, host, port)
    logs.log(logger, "serving metrics", url=f"http://{host}:{server.server_port}/metrics")
    try:
        server.serve_forever()
    finally:
        server.server_close()
    return 0


def make_server(config: Config, host: str, port: int) -> ThreadingHTTPServer:
    """An HTTP server answering ``GET /metrics``; ``port`` 0 picks a free one."""

    class Handler(BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            if self.path.split("?", 1)[0] != "/metrics":
                self._reply(404, "text/plain", b"not found: try /metrics\n")
                return
            body = scrape(config).encode()
            self._reply(200, metrics.CONTENT_TYPE, body)

        def _reply(self, code: int, content_type: str, body: bytes) -> None:
            self.send_response(code)
            self.send_header("Content-Type", content_type)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, format: str, *args: Any) -> None:
            pass  # one line per scrape would drown the stack's log

    try:
        return ThreadingHTTPServer((host, port), Handler)
    except OSError as exc:
        raise MemqError(f"cannot serve metrics on {host}:{port}: {exc}") from exc


def scrape(config: Config) -> str:
    """The metrics text for one scrape."""
    report = collect(config)
    families = status_families(report)
    if report["redis"]["ok"]:
        try:
            client = broker.client_for(config, timeout_s=5.0)
            with broker.translated(config.redis_url, "reading the writer's figures"):
                families += metrics.writer_families(client.hgetall(names.WRITER_STATS_KEY))
        except BrokerError as exc:
            logs.log(logger, "scrape incomplete", logging.WARNING, error=str(exc))
    return metrics.render(families)


def status_families(report: dict[str, Any]) -> list[Family]:
    """The gauges that come from a ``memq status`` report."""
    ok = Family("memq_collect_ok", "gauge", "1 if the source could be read")
    ok.add(report["redis"]["ok"], source="redis")
    ok.add(report["database"]["ok"], source="database")
    families = [ok]
    if report["redis"]["ok"]:
        families += _redis_families(report)
    if report["database"]["ok"]:
        families += _database_families(report["database"])
    return families


def _redis_families(report: dict[str, Any]) -> list[Family]:
    inbox = report["inbox"]
    jobs = Family("memq_queue_jobs", "gauge", "RQ jobs of memq's queues by state")
    workers = Family("memq_workers", "gauge", "RQ workers serving each memq queue")
    for queue, counts in report["queues"].items():
        for state, count in counts.items():
            jobs.add(count, queue=queue, state=state)
        workers.add(sum(1 for w in report["workers"] if queue in w["queues"]), queue=queue)
    oldest = inbox["oldest_age_s"]
    return [
        Family("memq_inbox_entries", "gauge", "Entries in the inbox streams").add(inbox["length"]),
        Family("memq_inbox_lag_entries", "gauge", "Entries the writer has not read yet").add(
            inbox["lag"]),
        Family("memq_inbox_pending_entries", "gauge", "Entries read but not committed").add(
            inbox["pending"]),
        Family("memq_inbox_oldest_age_seconds", "gauge",
               "Age of the oldest inbox entry (0 when empty)").add(oldest or 0.0),
        Family("memq_writer_up", "gauge", "1 while the writer's heartbeat is fresh").add(
            report["writer"]["alive"]),
        jobs,
        workers,
    ]


def _database_families(database: dict[str, Any]) -> list[Family]:
    messages = Family("memq_messages", "gauge", "Messages by embedding state")
    for state in ("embedded", "pending", "failed", "empty"):
        messages.add(database["messages"][state], state=state)
    size = Family("memq_database_bytes", "gauge", "Size of the SQLite database and its WAL")
    size.add(database["size_bytes"], file="db")
    size.add(database["wal_bytes"], file="wal")
    oldest = database["messages"]["oldest_pending_age_s"]
    return [
        messages,
        Family("memq_embedding_oldest_pending_age_seconds", "gauge",
               "Seconds since the oldest message still waiting for a vector was committed "
               "(0 when none waits)").add(oldest or 0.0),
        Family("memq_rejected_events", "gauge", "Rejected events not replayed yet").add(
            database["rejected"]),
        Family("memq_sessions", "gauge", "Sessions with at least one message").add(
            database["sessions"]),
        size,
    ]
