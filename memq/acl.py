"""The Redis ACL users of memq's roles: their rights, their credentials, who a process is.

Each role of :mod:`memq.authority` is one ACL user (:data:`USERNAMES`), and its rights are
built here, from the key patterns below: **this is the one place that says which Redis keys
each role may touch.** A process does not say which role it has: it asks Redis who it is
(``ACL WHOAMI``) and writes to that role's inbox stream. Any other user -- the ``default``
user of a Redis without ACL users, say -- holds whatever rights Redis gives it and counts as
admin: such a Redis is one trust domain, where every client may do everything.

=======  ==============================================================================
agent    RPUSH to ``memq:queue:agent`` only (write-only: it cannot read what others
         sent), in a MULTI with a read of its relayed count; read
         :data:`AGENT_READ_KEYS`; consume ``memq:agent-inbox`` with a consumer group;
         no stream the writer reads, no ``rq:*`` key, no pub/sub channel
worker   everything RQ workers do on ``rq:*`` (jobs, queues, registries, the worker's
         pub/sub channel); RPUSH to ``memq:queue:worker``; XADD ``memq:agent-inbox``;
         the fired markers of task runs; read the runs the writer registered
admin    every key, channel and command
=======  ==============================================================================

``memq up`` creates the users in its private Redis (and locks its ``default`` user);
``memq acl apply`` creates them in an existing one. Both write each role's URL, credentials
included, to ``<role>.url`` (0600) in the data directory, where the role's processes find
it (:func:`discover_url`).
"""

from __future__ import annotations

import hashlib
import os
import secrets
from pathlib import Path
from typing import Any
from urllib.parse import parse_qsl, quote, unquote, urlencode, urlsplit, urlunsplit

import redis
import redis.asyncio

from memq import names
from memq.authority import Role
from memq.config import ROLE_URL_FILE, private_redis_url

USERNAMES: dict[Role, str] = {
    Role.AGENT: "memq-agent",
    Role.WORKER: "memq-worker",
    Role.ADMIN: "memq-admin",
}
"""The ACL user of each role."""

_ROLE_OF_USER = {name: role for role, name in USERNAMES.items()}

URL_FILES: dict[Role, str] = {role: ROLE_URL_FILE.format(role=role.value) for role in Role}
"""The file, in the data directory, that holds each role's Redis URL (credentials included)."""

# -- the rights of each role: key patterns ---------------------------------------------------
# To let an agent read one more key (a freshness marker, say), add its name or glob pattern
# to AGENT_READ_KEYS; what it may run on those keys is AGENT_READ_COMMANDS.

AGENT_READ_KEYS: tuple[str, ...] = (
    names.RELAYED_KEYS[names.INBOX_STREAM],  # a push: where its items stand in the queue
    names.COMMITTED_ORDINAL_KEYS[names.INBOX_STREAM],  # flush(): how far it is committed
    f"{names.REJECTIONS_PREFIX}*",  # flush(): what the writer rejected, per sender
    names.DATABASE_KEY,  # reads: is this client's database the writer's?
    names.AGENT_INBOX_STREAM,  # task deliveries
    f"{names.ERASED_PREFIX}*",  # wait_forgotten(): what a forget erased, once it is done
)
"""Keys (or glob patterns) an agent may read."""

AGENT_CONSUMED_STREAMS: tuple[str, ...] = (names.AGENT_INBOX_STREAM,)
"""Streams an agent may read through a consumer group (XREADGROUP, XACK...), not write."""

WORKER_STREAMS: tuple[str, ...] = (names.AGENT_INBOX_STREAM,)
"""Streams a worker may XADD to (and nothing else): not one the writer reads."""

QUEUE_COMMANDS = ("+rpush", "+multi", "+exec", "+discard")
"""Sending to the writer: RPUSH to the role's queue, in a MULTI (see memq/inbox.py). Of
reads, LLEN alone (how far the queue reaches: a flush beyond it is refused), never what
another sender queued."""

WORKER_KEYS: tuple[str, ...] = ("rq:*", f"{names.TASK_FIRED_PREFIX}*")
"""Keys a worker may read and write: RQ's own, and the fired markers of task runs."""

WORKER_READ_KEYS: tuple[str, ...] = (
    f"{names.TASK_RUN_PREFIX}*",  # the task runs the writer registered
    names.RELAYED_KEYS[names.WORKER_INBOX_STREAM],  # a push: where its items stand
    names.COMMITTED_ORDINAL_KEYS[names.WORKER_INBOX_STREAM],  # flush(), run as worker
    f"{names.REJECTIONS_PREFIX}*",  # ... and what the writer rejected of it
)
"""Keys a worker may read only."""

WORKER_CHANNELS: tuple[str, ...] = ("rq:pubsub:*",)
"""Pub/sub channels of RQ workers (commands such as "stop this job" arrive there)."""

# -- ... and commands -------------------------------------------------------------------------

CONNECTION_COMMANDS = ("+ping", "+echo", "+select", "+hello", "+reset", "+quit",
                       "+client|setname", "+client|getname", "+client|id",
                       "+client|info", "+acl|whoami", "+wait")
"""What any client needs to connect, name itself and ask who it is. (Not CLIENT SETINFO,
which Redis 7.0 does not know; redis-py carries on when it is refused.)"""

AGENT_READ_COMMANDS = ("+@read", "-@keyspace", "-@dangerous", "-memory", "+exists", "+type",
                       "+ttl", "+pttl")
"""Reading values of the keys it may read; no key listing (SCAN, KEYS, RANDOMKEY). No
MEMORY either: Redis lets MEMORY USAGE read a key the user may only write, and on the
agents' queue it tells how much the other agents have queued."""

AGENT_CONSUMER_COMMANDS = ("+xreadgroup", "+xack", "+xgroup|create", "+xgroup|createconsumer",
                           "+xpending", "+xautoclaim", "+xinfo|stream", "+xinfo|groups",
                           "+xinfo|consumers")
"""Consuming task deliveries with a consumer group; an idle delivery is claimed with
XAUTOCLAIM. Not XCLAIM: its LASTID option moves any group's position, into the future
too, and the group then receives nothing more (an ACL rule cannot refuse one option)."""

WORKER_COMMANDS = ("+@all", "-@dangerous", "-@admin", "-@scripting", "+eval", "+evalsha",
                   "+script|load", "+script|exists", "+info", *CONNECTION_COMMANDS)
"""What RQ 2.x/3.x workers run: data commands, transactions, their Lua scripts (which run
with the worker's rights), INFO for the server version; nothing that administers Redis."""


def rules(role: Role) -> list[str]:
    """The ``ACL SETUSER`` rules of ``role`` (after ``reset``, without ``on`` or password)."""
    if role is Role.ADMIN:
        return ["~*", "&*", "+@all"]
    if role is Role.AGENT:
        return ["resetchannels", "-@all", *CONNECTION_COMMANDS,
                f"%W~{names.INBOX_QUEUES[names.INBOX_STREAM]}", *QUEUE_COMMANDS,
                *(f"%R~{key}" for key in AGENT_READ_KEYS), *AGENT_READ_COMMANDS,
                _selector(AGENT_CONSUMED_STREAMS, "%RW~", AGENT_CONSUMER_COMMANDS),
                _selector((names.INBOX_QUEUES[names.INBOX_STREAM],), "%R~", ("+llen",))]
    return ["resetchannels", *(f"&{c}" for c in WORKER_CHANNELS),
            *(f"~{key}" for key in WORKER_KEYS), *(f"%R~{key}" for key in WORKER_READ_KEYS),
            *WORKER_COMMANDS, _selector(WORKER_STREAMS, "%W~", ("+xadd",)),
            _selector((names.INBOX_QUEUES[names.WORKER_INBOX_STREAM],), "%W~", QUEUE_COMMANDS),
            _selector((names.INBOX_QUEUES[names.WORKER_INBOX_STREAM],), "%R~", ("+llen",))]


def _selector(keys: tuple[str, ...], prefix: str, commands: tuple[str, ...]) -> str:
    """A Redis 7 selector: these commands on these keys only, whatever the root rules say."""
    return "(" + " ".join([*(f"{prefix}{key}" for key in keys), *commands]) + ")"


# -- who a process is -------------------------------------------------------------------------


def role_for_user(username: str) -> Role:
    """The role of an ACL user name: memq's agent and worker users, else admin."""
    return _ROLE_OF_USER.get(username, Role.ADMIN)


def whoami(connection: redis.Redis) -> str:
    """The ACL user ``connection`` is authenticated as; raises redis' own errors.

    ``default`` before Redis 6 (no ACL) and for a user that may not even ask (none of
    memq's users: they all may).
    """
    try:
        name = connection.acl_whoami()
    except redis.exceptions.ResponseError as exc:
        return _whoami_refused(exc)
    return _text(name)


def role_of(connection: redis.Redis) -> Role:
    """The role this connection's credentials hold (one round trip; redis' own errors)."""
    return role_for_user(whoami(connection))


async def role_of_async(connection: redis.asyncio.Redis) -> Role:
    """:func:`role_of` for asyncio."""
    try:
        name = await connection.acl_whoami()
    except redis.exceptions.ResponseError as exc:
        return role_for_user(_whoami_refused(exc))
    return role_for_user(_text(name))


def _whoami_refused(exc: redis.exceptions.ResponseError) -> str:
    """``default`` where ACL WHOAMI is unknown or not allowed; any other error raised."""
    if isinstance(exc, redis.exceptions.NoPermissionError) or \
            "unknown command" in str(exc).lower():
        return "default"
    raise exc


# -- creating the users -----------------------------------------------------------------------


def new_passwords() -> dict[Role, str]:
    return {role: secrets.token_urlsafe(32) for role in Role}


def set_users(connection: redis.Redis, passwords: dict[Role, str]) -> None:
    """Create or reset the three users with these passwords (needs admin rights).

    ``reset`` first, so rules from an older memq never linger; one MULTI, so no client
    ever meets a user half made.
    """
    pipe = connection.pipeline(transaction=True)
    for role in Role:
        # By hand: redis-py's acl_setuser cannot express selectors.
        pipe.execute_command(  # type: ignore[no-untyped-call]
            "ACL", "SETUSER", USERNAMES[role], "reset", "on", f">{passwords[role]}",
            *rules(role))
    pipe.execute()


def users_present(connection: redis.Redis) -> set[Role]:
    """The roles whose ACL user exists in this Redis (needs a user that may list them)."""
    listed = {u.decode() if isinstance(u, bytes) else str(u) for u in connection.acl_users()}
    return {role for role, name in USERNAMES.items() if name in listed}


def acl_file(passwords: dict[Role, str]) -> str:
    """The users as a Redis ACL file, passwords stored as SHA-256 (``redis-server
    --aclfile``): the three roles, and the ``default`` user locked (:data:`LOCKED_DEFAULT`)."""
    lines = [f"user {USERNAMES[role]} on #{_sha256(passwords[role])} {' '.join(rules(role))}"
             for role in Role]
    locked = f"user default on #{_sha256(secrets.token_urlsafe(32))} {' '.join(LOCKED_DEFAULT)}"
    return "\n".join([locked, *lines]) + "\n"


LOCKED_DEFAULT = ("~*", "&*", "+@all")
"""The rights the ``default`` user keeps once locked with a password nobody knows.

Not ``off``, nor fewer rights: Redis replays its append-only file as the default user, and
before the fix of redis/redis#14541 (Redis 7.0 does not have it) the MULTI/EXEC blocks of
the file are checked against that user's rights and silently dropped when it lacks them,
so a restart would lose every acknowledgement, task run and delivery written in one."""


def lock_default_user(connection: redis.Redis) -> None:
    """Give ``default`` a random password that is then forgotten (see :data:`LOCKED_DEFAULT`):
    nobody can log in as it any more, and the append-only file still replays whole."""
    connection.execute_command(  # type: ignore[no-untyped-call]
        "ACL", "SETUSER", "default", "on", "resetpass", f">{secrets.token_urlsafe(32)}")


def _sha256(password: str) -> str:
    return hashlib.sha256(password.encode()).hexdigest()


# -- URLs and their files ---------------------------------------------------------------------


def role_url(base_url: str, role: Role, password: str) -> str:
    """``base_url`` (same server, database and options) with ``role``'s credentials."""
    return _with_credentials(base_url, f"{quote(USERNAMES[role], safe='')}:"
                                       f"{quote(password, safe='')}@")


def without_credentials(url: str) -> str:
    """``url`` with no user name or password, in its authority or its query."""
    return _with_credentials(url, "")


def _with_credentials(url: str, credentials: str) -> str:
    parts = urlsplit(url)
    host = parts.netloc.rpartition("@")[2]
    query = urlencode([(k, v) for k, v in parse_qsl(parts.query, keep_blank_values=True)
                       if k not in ("username", "password")])
    return urlunsplit((parts.scheme, credentials + host, parts.path, query, parts.fragment))


def password_in(url: str) -> str | None:
    """The password a URL carries, if any."""
    password = urlsplit(url).password
    return unquote(password) if password else None


def write_url_files(directory: Path, urls: dict[Role, str]) -> None:
    """Write each role's URL to its file, readable by its owner only (0600)."""
    for role, url in urls.items():
        path = directory / URL_FILES[role]
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        os.fchmod(fd, 0o600)  # an older file keeps its mode through O_TRUNC otherwise
        with os.fdopen(fd, "w") as fh:
            fh.write(url + "\n")


def read_url_file(directory: Path, role: Role) -> str | None:
    try:
        return (directory / URL_FILES[role]).read_text().strip() or None
    except (OSError, ValueError, UnicodeDecodeError):
        return None


def saved_passwords(directory: Path) -> dict[Role, str] | None:
    """The passwords of the URL files in ``directory``, if all three are there."""
    found = {}
    for role in Role:
        url = read_url_file(directory, role)
        password = password_in(url) if url else None
        if password is None:
            return None
        found[role] = password
    return found


def discover_url(db_path: str, role: Role) -> str | None:
    """The URL of ``role`` written next to the database ``db_path``, if there is one
    (what :func:`memq.config.load` reads when no Redis URL is configured)."""
    return private_redis_url(db_path, role.value)


def trust(connection: redis.Redis) -> dict[str, Any]:
    """Who this connection is, and whether this Redis separates memq's roles (for
    ``memq status``); ``users`` is None when this user may not list ACL users."""
    user = whoami(connection)
    try:
        present: set[Role] | None = users_present(connection)
        default: Any = connection.acl_getuser("default")
    except redis.exceptions.NoPermissionError:
        present, default = None, None
    flags = [_text(f) for f in (default or {}).get("flags", [])]
    return {
        "user": user,
        "role": role_for_user(user).value,
        "users": None if present is None else sorted(USERNAMES[r] for r in present),
        "one_trust_domain": present is not None and not present,
        # Whoever reaches Redis is admin without a password: what the roles cannot stop.
        "default_user_open": None if default is None else {"on", "nopass"} <= set(flags),
    }


def _text(value: bytes | str) -> str:
    return value.decode() if isinstance(value, bytes) else value
