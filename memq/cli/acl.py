"""``memq acl apply``: create memq's role users in an existing Redis and write their URLs.

Run it with admin credentials (any Redis user that may run ``ACL SETUSER``). The three users
are created, or reset to the rules of this memq (see :mod:`memq.acl`), and each role's URL,
credentials included, is written to ``agent.url``, ``worker.url`` and ``admin.url`` (0600)
in the data directory. Run again, it keeps the passwords of the files already there, so
the processes holding them go on working, unless ``--rotate`` is given.

With ``[redis] sentinels``, the users are created on the master and on every replica the
sentinels know: Redis does not replicate ACL users, and a replica promoted by a failover
must know memq's roles, or every process would be refused from then on.
"""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

import redis

from memq import acl, broker
from memq.authority import Role
from memq.cli.common import add_store_options, load_config
from memq.config import Config
from memq.errors import ConfigError


def register(sub: Any) -> None:
    parser = sub.add_parser("acl", help="the Redis ACL users of memq's roles")
    asub = parser.add_subparsers(dest="action", metavar="ACTION", required=True)
    apply_parser = asub.add_parser(
        "apply", help="create the agent, worker and admin users and write their URL files",
        description="Create (or bring up to date) memq's ACL users in the configured Redis, "
                    "with admin credentials, and write agent.url, worker.url and admin.url "
                    "(0600) into the data directory.")
    add_store_options(apply_parser)
    apply_parser.add_argument("--rotate", action="store_true",
                              help="new passwords, even if URL files already hold some")
    apply_parser.add_argument("--lock-default", action="store_true",
                              help="give Redis' default user a random password nobody keeps "
                                   "(connect with admin.url from then on; other clients of "
                                   "this Redis lose access)")
    apply_parser.set_defaults(func=apply_users)


def apply_users(args: argparse.Namespace) -> int:
    config = load_config(args)
    directory = Path(config.db_path).resolve().parent
    if not directory.is_dir():
        raise ConfigError(f"the data directory {directory} does not exist")
    passwords = (None if args.rotate else acl.saved_passwords(directory)) or acl.new_passwords()
    base = acl.without_credentials(config.redis_url)
    connection = broker.client_for(config)
    with broker.translated(config.redis_url, "creating memq's ACL users"):
        servers = [connection, *broker.replicas_of(config)]
        for server in servers:
            acl.set_users(server, passwords)
        acl.write_url_files(directory, {r: acl.role_url(base, r, passwords[r]) for r in Role})
        if args.lock_default:
            for server in servers:
                acl.lock_default_user(server)
        saved = {_save(server) for server in servers}
        default_open = acl.trust(connection)["default_user_open"]
    for role in Role:
        print(f"{acl.USERNAMES[role]:<12} {directory / acl.URL_FILES[role]}")
    if config.redis.sentinels:
        _sentinel_notes(config, len(servers) - 1, locked=args.lock_default)
    print("\n".join(sorted(saved)))
    if default_open:
        print("warning: the default user needs no password, so whoever reaches this Redis is "
              "admin: give agents agent.url only, and see --lock-default")
    return 0


def _sentinel_notes(config: Config, replicas: int, *, locked: bool) -> None:
    print(f"applied on the master and {replicas} replica(s) of {config.redis.service!r}")
    if locked:
        print("note: sentinels and replicas that connect as the default user have lost "
              "access: give them a user of their own (sentinel auth-user, masteruser)")


def _save(connection: redis.Redis) -> str:
    """Save the users to Redis' ACL file, if it has one (a restart forgets them otherwise)."""
    try:
        connection.execute_command("ACL", "SAVE")  # type: ignore[no-untyped-call]
    except redis.exceptions.ResponseError as exc:
        if isinstance(exc, redis.exceptions.NoPermissionError):
            raise
        return ("note: this Redis has no ACL file, so the users live until it restarts: run "
                "`memq acl apply` again then, or save them (CONFIG REWRITE)")
    return "saved to Redis' ACL file: the users survive a restart"
