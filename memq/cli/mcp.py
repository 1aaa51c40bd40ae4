"""``memq mcp``: serve memq's memory tools to MCP clients (``memq[mcp]``).

Over stdio by default (an MCP client starts the command and talks on its standard input
and output, so nothing else is printed there), or streamable HTTP with ``--http`` on
``http://HOST:PORT/mcp`` (127.0.0.1 by default). Over HTTP every request carries
``Authorization: Bearer <token>``, ``agent.token`` or ``admin.token`` beside the database
(:mod:`memq.tokens`, made when missing, as ``memq serve`` does) or an API key, whose
grant each tool call is then admitted against, and whose budget it spends, as ``memq
serve`` admits and counts its calls, and a ``Host`` that names the server (the guard of
``memq serve``: a rebound DNS name gets 421). Over stdio the parent process's trust is
the server's. The tools act with an agent's credentials (``agent.url``), never the
person's, whichever token was shown; a key's calls go on the keys' queue, which only the
admin's credentials may push, and are judged there with an agent's rights and the key's
grant.

With ``--server URL`` (stdio), the tools act through ``memq serve`` at that address with
the bearer token in ``MEMQ_TOKEN`` (an API key: the tools then reach only its grant), for
an MCP client on a host without the database.
"""

from __future__ import annotations

import argparse
import os
from pathlib import Path
from typing import TYPE_CHECKING, Any, cast

from memq.authority import Role
from memq.cli.common import add_store_options, load_config, port
from memq.server.guard import ASGIApp, Receive, Scope, Send
from memq.tokens import Tokens, ensure_secret

if TYPE_CHECKING:  # the server's parts load the client and its model runtime: on use only
    from memq import MemoryClient
    from memq.server.principals import Principals

MAX_BODY_BYTES = 4 * 1024 * 1024


def register(sub: Any) -> None:
    parser = sub.add_parser(
        "mcp", help="serve the memory tools (remember, recall, facts, schedule, forget) "
                    "over MCP: stdio, or streamable HTTP with --http")
    parser.add_argument("--http", action="store_true",
                        help="serve streamable HTTP on HOST:PORT/mcp instead of stdio")
    parser.add_argument("--host", default="127.0.0.1",
                        help="address for --http (default 127.0.0.1)")
    parser.add_argument("--port", type=port, default=8421, help="port for --http (default 8421)")
    parser.add_argument("--allow-host", action="append", default=[], metavar="NAME",
                        help="with --http, also answer to this Host name (as memq serve)")
    parser.add_argument("--server", metavar="URL",
                        help="act through memq serve at URL with the key in MEMQ_TOKEN "
                             "(stdio only)")
    add_store_options(parser)
    parser.set_defaults(func=run_mcp)


def run_mcp(args: argparse.Namespace) -> int:
    from memq import MemoryClient
    from memq.errors import ConfigError

    try:
        from memq.integrations.mcp import build_server, serve
    except ImportError as exc:
        raise ConfigError("memq mcp needs the MCP SDK: pip install 'memq[mcp]'") from exc
    if args.server:
        return _through_server(args)
    config = load_config(args, role=Role.AGENT)
    if not args.http:
        with MemoryClient(config=config) as client:
            serve("stdio", client=client)
        return 0
    directory = Path(config.db_path).resolve().parent
    directory.mkdir(parents=True, exist_ok=True)
    tokens = Tokens.in_directory(directory)  # refuses to start when they cannot be made
    from memq.integrations._client import ToolsClient
    from memq.server.budgets import Budgets
    from memq.server.granted import GrantedClient

    with MemoryClient(config=config) as client, \
            MemoryClient(config=load_config(args, role=Role.ADMIN)) as keyed:
        door = principals(client, tokens, directory, config.serve.require_keys)
        # Each request's key decides what its tool calls reach and spends its budget, on
        # the counters every memq serve of this Redis shares (server/granted.py).
        tools = cast(ToolsClient, GrantedClient(client, keyed,
                                                budgets=Budgets.configured(keyed)))
        serve_http(build_server(tools), door, args)
    return 0


def principals(client: MemoryClient, tokens: Tokens, directory: Path,
               require_keys: bool) -> Principals:
    """The door of memq serve: its tokens, the keys in the database, the delegated tokens
    its servers sign (the same secret file)."""
    from memq.cli.serve import DELEGATION_SECRET
    from memq.server.delegation import Delegations
    from memq.server.principals import KeyRing, Principals, keys_in

    secret = ensure_secret(directory / DELEGATION_SECRET).encode()
    return Principals(tokens, KeyRing(keys_in(client.readers)), Delegations(secret),
                      require_keys=require_keys)


def _through_server(args: argparse.Namespace) -> int:
    from memq import RemoteMemoryClient
    from memq.errors import ConfigError
    from memq.integrations.mcp import serve

    if args.http:
        raise ConfigError("--server serves over stdio: each HTTP caller would need a key of "
                          "its own, so point HTTP clients at memq serve itself")
    token = os.environ.get("MEMQ_TOKEN", "").strip()
    if not token:
        raise ConfigError("--server needs the bearer token in MEMQ_TOKEN (an API key from "
                          "memq keys create): never on the command line, where ps shows it")
    with RemoteMemoryClient(args.server, token=token) as client:
        serve("stdio", client=client)
    return 0


def serve_http(server: Any, door: Principals, args: argparse.Namespace) -> None:
    import uvicorn
    from mcp.server.transport_security import TransportSecuritySettings

    from memq.cli.serve import allowed_hosts
    from memq.server.guard import Guard

    # The guard checks Host with memq serve's list; the SDK's own check (loopback names
    # only, when bound there) would refuse the names --allow-host adds.
    unchecked = TransportSecuritySettings(enable_dns_rebinding_protection=False)
    # Stateless: each request is served in its own context, so the key it came with is the
    # one its tool calls are admitted against (a session's task would keep the first's).
    mcp_app = server.streamable_http_app(transport_security=unchecked, stateless_http=True)
    # No early refusal of a spent key (memq serve's ``spent=``): the guard's 429 reaches an
    # MCP client as a failed request, not a tool's error the model can read and wait on,
    # and it would refuse the free requests too (initialize, tools/list). A key's tool
    # calls are refused by the budget instead, as each spends it.
    app = Guard(bearer(mcp_app, door), allowed_hosts(args.host, args.allow_host),
                MAX_BODY_BYTES, tokens=door, holder=door.holder_of)
    uvicorn.run(app, host=args.host, port=args.port, log_level="warning")


def bearer(app: ASGIApp, door: Principals) -> ASGIApp:
    """``app`` behind a bearer token: a role's token or a key (whose grant the request's
    tool calls are admitted against), else a 401 problem."""
    from memq.server.granted import CALLER

    async def checked(scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await app(scope, receive, send)
            return
        given = dict(scope.get("headers", ())).get(b"authorization", b"")
        scheme, _, token = given.decode("latin-1").partition(" ")
        found = door.principal(token.strip()) if scheme.lower() == "bearer" else None
        if found is None:
            await unauthorized(send)
            return
        reset = CALLER.set(found.grant)
        try:
            await app(scope, receive, send)
        finally:
            CALLER.reset(reset)

    return checked


async def unauthorized(send: Send) -> None:
    import orjson

    from memq.problems import MEDIA_TYPE, problem

    body = orjson.dumps(problem("AuthenticationFailed", 401, "a bearer token is needed: "
                                "a key (memq keys create), or agent.token or admin.token "
                                "beside the database"))
    await send({"type": "http.response.start", "status": 401,
                "headers": [(b"content-type", MEDIA_TYPE.encode()),
                            (b"www-authenticate", b'Bearer realm="memq"'),
                            (b"content-length", str(len(body)).encode())]})
    await send({"type": "http.response.body", "body": body})
