"""``memq dashboard``: rq-dashboard for memq's Redis, on 127.0.0.1 unless told otherwise.

rq-dashboard listens on every interface by default and has no protection of its own; memq
binds it to the loopback interface and puts :mod:`memq.cli.dashboard_guard` in front: the
Redis admin's credentials (HTTP Basic: the user name and password of the admin's URL, as
``admin.url`` holds them), a Host allow-list, and no cross-origin change. With a Redis URL
that holds no password (one trust domain), a random one is made at start and written to
``dashboard.password`` (0600) in the data directory. Jobs are read with the JSON serializer
memq's queues use, and the queues are registered up front so they show before a job does.
"""

from __future__ import annotations

import argparse
import logging
import os
import secrets
from pathlib import Path
from typing import Any
from urllib.parse import unquote, urlsplit

from memq import broker, logs, names
from memq.cli.common import add_store_options, load_config, port
from memq.cli.dashboard_guard import LOOPBACK_HOSTS, Credentials, Guard
from memq.config import Config

logger = logging.getLogger("memq.dashboard")


def register(sub: Any) -> None:
    parser = sub.add_parser("dashboard", help="serve rq-dashboard for memq's queues")
    add_store_options(parser)
    parser.add_argument("--host", help="address to bind (default: [ops] dashboard_host, "
                                       "127.0.0.1)")
    parser.add_argument("--port", type=port, help="port (default: [ops] dashboard_port, 9181)")
    parser.add_argument("--allow-host", action="append", default=[], metavar="NAME",
                        help="also answer to this host name (repeatable; default: [ops] "
                             "dashboard_allowed_hosts, and the address and loopback names)")
    parser.set_defaults(func=serve_dashboard)


def serve_dashboard(args: argparse.Namespace) -> int:
    logs.setup()
    config = load_config(args)
    host = args.host or config.ops.dashboard_host
    port = config.ops.dashboard_port if args.port is None else args.port
    hosts = allowed_hosts(host, [*config.ops.dashboard_allowed_hosts, *args.allow_host])
    register_queues(config)
    app = make_app(config)
    login = credentials(config)
    app.wsgi_app = Guard(app.wsgi_app, login, hosts)
    where = "the Redis URL's" if urlsplit(config.redis_url).password else "dashboard.password"
    logs.log(logger, "serving rq-dashboard", url=f"http://{host}:{port}/", user=login.username,
             password=where, allowed_hosts=sorted(hosts))
    app.run(host=host, port=port, debug=False, use_reloader=False)
    return 0


def allowed_hosts(bound: str, extra: list[str]) -> set[str]:
    """The names the dashboard answers to: the address it is bound to (unless a wildcard),
    the loopback names, and the ones configured."""
    hosts = set(LOOPBACK_HOSTS) | {name.lower().strip("[]") for name in extra}
    if bound not in ("0.0.0.0", "::", ""):
        hosts.add(bound.lower().strip("[]"))
    return hosts


def credentials(config: Config) -> Credentials:
    """The admin's user name and password, from the Redis URL; a password made for this run
    (and written next to the database) when the URL holds none."""
    parts = urlsplit(config.redis_url)
    username = unquote(parts.username) if parts.username else "default"
    if parts.password:
        return Credentials(username, unquote(parts.password))
    password = secrets.token_urlsafe(24)
    path = Path(config.db_path).resolve().parent / "dashboard.password"
    path.parent.mkdir(parents=True, exist_ok=True)
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    os.fchmod(fd, 0o600)
    with os.fdopen(fd, "w") as fh:
        fh.write(password + "\n")
    logs.log(logger, "the Redis URL holds no password: the dashboard's is in a file",
             logging.WARNING, user=username, password_file=str(path))
    return Credentials(username, password)


def make_app(config: Config) -> Any:
    """The rq-dashboard Flask app, reading memq's Redis with the JSON serializer."""
    from rq.serializers import JSONSerializer
    from rq_dashboard import web
    from rq_dashboard.cli import make_flask_app

    app = make_flask_app(None, None, None, "")
    app.config["RQ_DASHBOARD_REDIS_URL"] = config.redis_url
    web.config.serializer = JSONSerializer
    web.setup_rq_connection(app)
    # rq-dashboard's own connection knows no ACL user for its sentinels: memq's does, and
    # follows a failover like every other process's.
    app.redis_conn = broker.client_for(config)
    return app


def register_queues(config: Config) -> None:
    """Make memq's queues known to RQ (its ``rq:queues`` set) even before a job is sent."""
    from memq.jobs import queue

    client = broker.client_for(config)
    with broker.translated(config.redis_url, "registering memq's queues"):
        for name in names.QUEUES:
            q = queue(name, client)
            client.sadd(q.redis_queues_keys, q.key)
