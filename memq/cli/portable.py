"""``memq export`` and ``memq import``: one user's memory out of a database, and into
another (or another tenant), as the versioned JSON lines of :mod:`memq.portable`.

``export`` reads the database beside it (everything of the user: turns, summaries, facts
with their history, documents, and with ``--vectors`` the turns' embeddings), or, with
``--server URL``, asks ``memq serve`` with the key in ``MEMQ_TOKEN``: what that key may
read of the user, through the change feed (no vectors). ``import`` checks the whole file
before it sends anything, then sends its events with the person's credentials.
"""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Iterator
from typing import Any

import orjson

from memq import portable, tenants
from memq.cli.common import (
    add_store_options,
    add_wait_option,
    load_config,
    person,
    read_database,
    wait_committed,
)
from memq.errors import ValidationError

CHUNK = 500
"""Events sent at once by an import."""


def register(sub: Any) -> None:
    export = sub.add_parser("export", help="one user's memory as JSON lines, on stdout")
    export.add_argument("--user", required=True, metavar="USER")
    export.add_argument("--tenant", default=tenants.DEFAULT, metavar="T",
                        help="the user's tenant (default: default)")
    export.add_argument("--vectors", action="store_true",
                        help="with the turns' embeddings (saves embedding them again)")
    export.add_argument("--server", metavar="URL",
                        help="ask memq serve with the key in MEMQ_TOKEN (what it may read)")
    add_store_options(export, redis=False)
    export.set_defaults(func=export_user)
    load = sub.add_parser("import", help="load an export (idempotent by event ids)")
    load.add_argument("file", metavar="FILE", help="an export (- for stdin)")
    load.add_argument("--tenant", metavar="T",
                      help="the tenant to load it into (default: the file's own)")
    add_wait_option(load)
    add_store_options(load)
    load.set_defaults(func=import_file)


def export_user(args: argparse.Namespace) -> int:
    tenant = tenants.check_name(args.tenant, "--tenant")
    # Read whole before the first line is written: a refusal leaves no partial file.
    events = list(_remote(args)) if args.server else _local(args, tenant)
    from memq.clock import now_rfc3339

    out = sys.stdout.buffer
    for line in portable.write(args.user, tenant, now_rfc3339(), events):
        out.write(line)
    out.flush()
    return 0


def _local(args: argparse.Namespace, tenant: str) -> list[dict[str, Any]]:
    from memq.events import check_identifier, encode
    from memq.store.read.export import user_events

    stored = tenants.inside(tenant, check_identifier("--user", args.user))
    found = read_database(load_config(args).db_path, lambda conn: list(
        user_events(conn, stored, vectors=args.vectors)))

    def name(value: str) -> str:
        return tenants.split(value)[1]
    return [portable.renamed(orjson.loads(encode(e)), name) for e in found]


def _remote(args: argparse.Namespace) -> Iterator[dict[str, Any]]:
    from memq import RemoteMemoryClient

    if args.vectors:
        raise ValidationError("--vectors reads the database: the API exports no vectors")
    token = os.environ.get("MEMQ_TOKEN") or ""
    with RemoteMemoryClient(args.server, token=token) as client:
        for change in client.changes(user_id=args.user, follow=False):
            if change.data is not None and not change.type.endswith(".forgotten"):
                yield {"id": change.id, "type": change.type, "v": change.version,
                       "session_id": change.session_id, "created_at": change.created_at,
                       "payload": change.data}


def import_file(args: argparse.Namespace) -> int:
    from memq.store.read.sessions import owner

    export = _read(args.file)
    tenant = tenants.check_name(args.tenant or export.tenant, "--tenant")
    if tenants.SEPARATOR in export.user_id:
        raise ValidationError("line 1: the user's id holds a control character")

    def owner_of(session: str) -> str | None:
        found = read_database(load_config(args).db_path, lambda conn: owner(
            conn, tenants.inside(tenant, session)))
        stored = None if found is None else found.user_id
        return None if stored is None else tenants.split(stored)[1]
    portable.check_owned(export, owner_of)
    events = _events(export, tenant)
    with person(args) as client:
        for start in range(0, len(events), CHUNK):
            client.outbox.send_many(events[start:start + CHUNK])
        wait_committed(client, args.wait)
    print(f"loaded {len(events)} events of {export.user_id!r} into tenant {tenant!r} "
          "(an event loaded before is applied once)")
    return 0


def _read(path: str) -> portable.Export:
    if path == "-":
        return portable.read(sys.stdin.buffer)
    try:
        with open(path, "rb") as lines:
            return portable.read(lines)
    except OSError as exc:
        raise ValidationError(f"{path}: {exc.strerror}") from None


def _events(export: portable.Export, tenant: str) -> list[Any]:
    """The file's events as ``tenant``'s, each checked as the writer will check it."""
    from memq.events import from_dict

    def name(value: str) -> str:
        return tenants.inside(tenant, value)
    found = []
    for number, event in enumerate(export.events, start=2):
        mapped = portable.renamed(event, name)
        if tenant != export.tenant:
            mapped = portable.rekeyed(mapped, tenant)
        try:
            found.append(from_dict(mapped))
        except ValidationError as exc:
            raise ValidationError(f"line {number}: {exc}") from None
    return found

