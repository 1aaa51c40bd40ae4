"""``memq serve``: the client's operations over HTTP (``memq.server``).

Bearer tokens stand for roles: ``agent.token`` and ``admin.token`` (0600, made beside the
database when missing). Each role's requests run on a client with that role's own Redis
credentials, the users ``memq up`` / ``memq acl apply`` made, whose passwords are in
``agent.url`` / ``admin.url``; a server whose agent credentials would hold more than the
agent's rights refuses to start, so a token can never do more than its role. Loopback by
default; ``--ssl-certfile`` / ``--ssl-keyfile`` serve HTTPS (or put it behind a proxy that
terminates TLS).
"""

from __future__ import annotations

import argparse
import logging
import socket
from pathlib import Path
from typing import Any

from memq import acl, broker, logs
from memq.authority import Role
from memq.cli.common import add_store_options, latency_first, load_config, port
from memq.config import Config
from memq.errors import ConfigError
from memq.tokens import SERVED_ROLES, Tokens, ensure_secret, token_path

logger = logging.getLogger("memq.serve")
WILDCARDS = ("0.0.0.0", "::", "")
DELEGATION_SECRET = "delegation.secret"
"""Beside the database: what every server of it signs delegated tokens with."""


def register(sub: Any) -> None:
    parser = sub.add_parser("serve", help="serve the client's operations over HTTP")
    add_store_options(parser)
    parser.add_argument("--host", default="127.0.0.1", help="address to bind (127.0.0.1)")
    parser.add_argument("--port", type=port, default=8420, help="port (8420)")
    parser.add_argument("--allow-host", action="append", default=[], metavar="NAME",
                        help="also answer to this Host name (repeatable; '*': any); the "
                             "bound address, loopback names and this machine's name always")
    parser.add_argument("--ssl-certfile", help="serve HTTPS with this certificate (PEM)")
    parser.add_argument("--ssl-keyfile", help="... and this private key (PEM)")
    parser.set_defaults(func=serve)


def serve(args: argparse.Namespace) -> int:
    import uvicorn

    from memq.server.app import create_app

    logs.setup()
    latency_first()
    config = load_config(args)
    directory = Path(config.db_path).resolve().parent
    directory.mkdir(parents=True, exist_ok=True)
    bases = clients(config, role_urls(config))
    tokens = Tokens.in_directory(directory)
    hosts = allowed_hosts(args.host, args.allow_host)
    app = create_app(bases, tokens, allowed_hosts=hosts,
                     require_keys=config.serve.require_keys,
                     delegation_secret=ensure_secret(directory / DELEGATION_SECRET))
    scheme = "https" if args.ssl_certfile else "http"
    # The schema, not /docs: the API serves no page that loads scripts from elsewhere.
    base = f"{scheme}://{args.host}:{args.port}"
    logs.log(logger, "serving the memq API", url=f"{base}/v1", schema=f"{base}/openapi.json",
             console=f"{base}/ui",
             tokens=[str(token_path(directory, role)) for role in SERVED_ROLES])
    try:
        uvicorn.run(app, host=args.host, port=args.port, log_level="warning",
                    ssl_certfile=args.ssl_certfile, ssl_keyfile=args.ssl_keyfile)
    finally:
        for client in bases.values():
            client.close()
    return 0


def role_urls(config: Config) -> dict[Role, str]:
    """Each served role's URL to the configured Redis, with that role's password from its
    URL file; refused if the credentials hold another role than theirs."""
    directory = Path(config.db_path).resolve().parent
    urls = {}
    for role in SERVED_ROLES:
        saved = acl.read_url_file(directory, role)
        password = acl.password_in(saved) if saved else None
        urls[role] = config.redis_url if password is None else acl.role_url(
            config.redis_url, role, password)
        check_role(config.replace(redis_url=urls[role]), role)
    return urls


def check_role(config: Config, role: Role) -> None:
    url = config.redis_url
    connection = broker.client_for(config)
    with broker.translated(url, "asking Redis who the served credentials are"):
        held = acl.role_of(connection)
    connection.close()
    if held != role:
        raise ConfigError(
            f"the {role.value} token would act with the {held.value} role's rights: this "
            f"Redis has no memq {role.value} user, or no {acl.URL_FILES[role]} beside the "
            "database says its password; run `memq acl apply` (or start with `memq up`)")


def clients(config: Config, urls: dict[Role, str]) -> dict[Role, Any]:
    from memq.producers.client import MemoryClient

    return {role: MemoryClient(config=config.replace(redis_url=url)) for role, url in urls.items()}


def allowed_hosts(bound: str, extra: list[str]) -> set[str]:
    """The Host names served: the bound address (unless a wildcard), this machine's name,
    and ``--allow-host`` (the guard adds the loopback names)."""
    hosts = {name.lower().strip("[]") for name in extra} | {socket.gethostname().lower()}
    if bound not in WILDCARDS:
        hosts.add(bound.lower().strip("[]"))
    return hosts
