"""Options and helpers shared by the command modules."""

from __future__ import annotations

import argparse
import dataclasses
import math
import os
import sys
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import TYPE_CHECKING, TypeVar

import orjson

from memq import config as config_module
from memq.authority import Role
from memq.config import Config

if TYPE_CHECKING:
    import apsw

    from memq import MemoryClient

T = TypeVar("T")

SWITCH_INTERVAL_S = 0.001
"""How long a thread may hold the interpreter while another waits for it, in the server
and the writer (Python's default: 5 ms)."""


def latency_first() -> None:
    """Hand the interpreter between threads every millisecond, not every five.

    The server and the writer are threads that mostly wait on sockets and SQLite, which
    release the interpreter, and each wait ends by taking it back: behind a thread busy
    with one key's 100-turn batch, every such return could wait 5 ms, and a small call
    makes several. With the relay's light keys (store/write/relay.py), bench/fairness.py
    gave another key's slowest turns (p99) x3.3-4.4 their time alone, against x4.6-5.3
    with neither (six runs each, alternated); this alone made no difference that three
    runs could show.
    """
    sys.setswitchinterval(SWITCH_INTERVAL_S)


def add_store_options(
    parser: argparse.ArgumentParser, *, redis: bool = True,
    redis_help: str = "Redis URL (default: $MEMQ_REDIS_URL)",
) -> None:
    parser.add_argument("--config", help="path of memq.toml (default: $MEMQ_CONFIG)")
    parser.add_argument("--db", help="SQLite file (default: $MEMQ_DB or data/memq.db)")
    if redis:
        parser.add_argument("--redis-url", help=redis_help)


def integer_in(what: str, low: int, high: int) -> Callable[[str], int]:
    """An argparse type: an integer from ``low`` to ``high``; errors name it ``what``."""

    def parse(text: str) -> int:
        try:
            value = int(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"not a {what}: {text!r:.40}") from None
        if not low <= value <= high:
            raise argparse.ArgumentTypeError(f"a {what} is from {low} to {high}, got {value}")
        return value

    return parse


def number_in(what: str, low: float, high: float) -> Callable[[str], float]:
    """An argparse type: a finite number from ``low`` to ``high``; errors name it ``what``."""

    def parse(text: str) -> float:
        try:
            value = float(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"not a {what}: {text!r:.40}") from None
        if not math.isfinite(value) or not low <= value <= high:
            raise argparse.ArgumentTypeError(f"a {what} is from {low:g} to {high:g}, "
                                             f"got {text:.40}")
        return value

    return parse


port = integer_in("port number", 0, 65535)
"""An argparse type: a TCP port number (0 picks a free one)."""


def whole_number(text: str) -> int:
    """An argparse type: an integer of at most 18 digits (an id or a count)."""
    digits = text.strip().removeprefix("-")
    if not (digits.isascii() and digits.isdigit() and len(digits) <= 18):
        raise argparse.ArgumentTypeError(f"not a whole number of at most 18 digits: {text!r:.40}")
    return int(text)


def positive_seconds(text: str) -> float:
    """An argparse type: a duration in seconds, greater than zero."""
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a number of seconds: {text!r}") from None
    if not value > 0 or value == float("inf"):
        raise argparse.ArgumentTypeError(
            f"must be a positive number of seconds, got {text:.40}")
    return value


def load_config(
    args: argparse.Namespace, *, discover_redis: bool = True, role: Role = Role.ADMIN
) -> Config:
    """The configuration, with command-line options winning over file and environment.

    With no Redis URL configured anywhere, a command finds the URL of its role (admin: the
    person; ``memq worker`` asks for the worker's) that ``memq up`` or ``memq acl apply``
    wrote into the data directory (see :func:`memq.config.load`).
    """
    config = config_module.load(getattr(args, "config", None),
                                db_path=getattr(args, "db", None),
                                redis_url=getattr(args, "redis_url", None),
                                discover_redis=discover_redis, role=role.value)
    if getattr(args, "model_dir", None):
        model_dir = os.path.abspath(args.model_dir)
        config = config.replace(embed=dataclasses.replace(config.embed, model_dir=model_dir))
    return config


def add_wait_option(parser: argparse.ArgumentParser) -> None:
    """``--wait SECONDS``: how long a command that changes something waits for the writer."""
    parser.add_argument("--wait", type=non_negative_seconds, default=10.0, metavar="SECONDS",
                        help="wait this long for the writer to commit the change (default 10; "
                             "0: send it and return)")


def non_negative_seconds(text: str) -> float:
    """An argparse type: a duration in seconds, zero or more."""
    if text.strip() in ("0", "0.0"):
        return 0.0
    return positive_seconds(text)


@contextmanager
def person(args: argparse.Namespace) -> Iterator[MemoryClient]:
    """A client with the person's credentials (the admin's URL, as every command finds it):
    what the commands that approve, set user facts and manage trusted tasks act through."""
    from memq import MemoryClient  # the CLI alone may import the roles

    with MemoryClient(config=load_config(args)) as client:
        yield client


def wait_committed(client: MemoryClient, seconds: float) -> None:
    """Return once the writer has committed what ``client`` sent (not at all for 0)."""
    from memq.errors import FlushTimeout

    if seconds <= 0:
        return
    try:
        client.flush(seconds)
    except FlushTimeout as exc:
        raise FlushTimeout(f"sent, but not applied yet: {exc}") from exc


def print_json(value: object) -> None:
    """What every ``--json`` prints: one JSON object, indented, whatever the command.

    One shape for scripts: ``json.load`` or ``jq`` read the whole output; lists come inside
    the object under a plural name (``"items"``, ``"tasks"``, ``"facts"``...)."""
    print(orjson.dumps(value, option=orjson.OPT_INDENT_2).decode())


def read_database(db_path: str, query: Callable[[apsw.Connection], T]) -> T:
    """``query`` on a read-only connection to ``db_path``, closed afterwards; a file that is
    not memq's, or an error of SQLite's (a schema an upgrade has not migrated yet), is a
    StoreError naming it."""
    import apsw

    from memq.errors import StoreError
    from memq.store import schema
    from memq.store.connection import open_connection

    conn = open_connection(db_path, readonly=True)
    try:
        schema.require_memq(conn, db_path)
        return query(conn)
    except apsw.Error as exc:
        raise StoreError(f"read from {db_path} failed: {exc}") from exc
    finally:
        conn.close()


