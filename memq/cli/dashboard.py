"""``memq dashboard``: rq-dashboard for memq's Redis, on 127.0.0.1 unless told otherwise.

rq-dashboard listens on every interface by default and has no authentication of its own;
memq binds it to the loopback interface and reads jobs with the JSON serializer its queues
use. memq's queues are registered up front so that they show before their first job.
"""

from __future__ import annotations

import argparse
import logging
from typing import Any

from memq import broker, logs, names
from memq.cli.common import add_store_options, load_config, port
from memq.config import Config

logger = logging.getLogger("memq.dashboard")


def register(sub: Any) -> None:
    parser = sub.add_parser("dashboard", help="serve rq-dashboard for memq's queues")
    add_store_options(parser)
    parser.add_argument("--host", help="address to bind (default: [ops] dashboard_host, "
                                       "127.0.0.1)")
    parser.add_argument("--port", type=port, help="port (default: [ops] dashboard_port, 9181)")
    parser.set_defaults(func=serve_dashboard)


def serve_dashboard(args: argparse.Namespace) -> int:
    logs.setup()
    config = load_config(args)
    host = args.host or config.ops.dashboard_host
    port = config.ops.dashboard_port if args.port is None else args.port
    register_queues(config)
    app = make_app(config)
    logs.log(logger, "serving rq-dashboard", url=f"http://{host}:{port}/")
    app.run(host=host, port=port, debug=False, use_reloader=False)
    return 0


def make_app(config: Config) -> Any:
    """The rq-dashboard Flask app, reading memq's Redis with the JSON serializer."""
    from rq.serializers import JSONSerializer
    from rq_dashboard import web
    from rq_dashboard.cli import make_flask_app

    app = make_flask_app(None, None, None, "")
    app.config["RQ_DASHBOARD_REDIS_URL"] = config.redis_url
    web.config.serializer = JSONSerializer
    web.setup_rq_connection(app)
    return app


def register_queues(config: Config) -> None:
    """Make memq's queues known to RQ (its ``rq:queues`` set) even before a job is sent."""
    from workers.queues import queue

    client = broker.connect(config.redis_url)
    with broker.translated(config.redis_url, "registering memq's queues"):
        for name in names.QUEUES:
            q = queue(name, client)
            client.sadd(q.redis_queues_keys, q.key)
