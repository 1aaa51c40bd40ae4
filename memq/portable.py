"""The export format: one user's events as versioned JSON lines that another database (or
another tenant) can load, and that cannot be changed unnoticed.

::

    {"memq_export": 1, "user_id": "alice", "tenant": "default", "exported_at": "..."}
    {"event": {...the event, ids in the tenant's names...}, "sha256": "<its digest>"}
    ...
    {"manifest": {"events": 812, "counts": {"message.appended": 640, ...},
                  "sha256": "<digest of every line above>"}}

Each event line carries the digest of its event, so an edited line is named; the manifest
counts the events and digests every line before it, so a truncated, reordered or spliced
file is refused too. Loading keeps each event's id: loading twice adds nothing (the writer
applies an event id once). Into another tenant than the file's, every event and message id
is made anew from the old one and the tenant (the same each time), so the copy is its own
and loading it twice still adds nothing.
"""

from __future__ import annotations

import hashlib
import uuid
from collections import Counter
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from typing import Any

import orjson

from memq import tenants
from memq.errors import ValidationError

VERSION = 1
MAPPED = ("user_id", "agent_id")
"""Payload fields that are ids inside a tenant (the event's ``session_id`` is one too)."""
MESSAGE_IDS = ("message_id", "summary_id")
DATA_TYPES = frozenset({"message.appended", "message.embedded", "session.consolidated",
                        "fact.set", "fact.deleted", "document.put", "document.deleted",
                        "document.touched"})
"""What an export holds: one user's data, nothing that grants, approves or schedules."""
_IDS = uuid.UUID("5e1f7c0e-8a7d-4c59-9d51-6d656d712d78")
"""The namespace of the ids a load into another tenant makes (uuid5)."""


@dataclass(frozen=True)
class Export:
    user_id: str
    tenant: str
    events: list[dict[str, Any]]
    """Each event's wire form (``memq.events.encode``), ids in the tenant's names."""


def write(user_id: str, tenant: str, exported_at: str,
          events: Iterable[dict[str, Any]]) -> Iterator[bytes]:
    """The lines of an export (each ending in a newline)."""
    whole, counts = hashlib.sha256(), Counter[str]()
    header = orjson.dumps({"memq_export": VERSION, "user_id": user_id, "tenant": tenant,
                           "exported_at": exported_at}) + b"\n"
    whole.update(header)
    yield header
    for event in events:
        line = orjson.dumps({"event": event, "sha256": _digest(event)}) + b"\n"
        whole.update(line)
        counts[event["type"]] += 1
        yield line
    yield orjson.dumps({"manifest": {"events": sum(counts.values()), "counts": counts,
                                     "sha256": whole.hexdigest()}}) + b"\n"


def read(lines: Iterable[bytes]) -> Export:
    """An export's content; ValidationError naming the line of the first problem."""
    whole, header = hashlib.sha256(), None
    events: list[dict[str, Any]] = []
    found: Export | None = None
    number = 0
    for number, line in enumerate(lines, start=1):
        if found is not None:
            raise ValidationError(f"line {number}: a line after the manifest")
        data = _json(number, line)
        if number == 1:
            header = _header(data)
        elif "manifest" in data and header is not None:
            _check_manifest(number, data["manifest"], events, whole.hexdigest())
            found = Export(header["user_id"], header["tenant"], events)
        else:
            events.append(_event(number, data))
        whole.update(line if line.endswith(b"\n") else line + b"\n")
    if found is None:
        raise ValidationError(f"line {number + 1}: the file ends before its manifest: it "
                              "was cut short (or is not a memq export)")
    return found


def check_owned(export: Export, owner_of: Callable[[str], str | None]) -> None:
    """ValidationError naming the line unless every event is the file's user's data: a
    kind an export holds (:data:`DATA_TYPES`), facts and documents of that user, turns and
    summaries of sessions that are new or already the user's (``owner_of``: a session's
    user in the database loaded into, by its id in the file), results of the file's own
    turns. An import sends with the person's rights: a file must not carry more."""
    user, sessions, messages = export.user_id, set[str](), set[str]()
    for number, event in enumerate(export.events, start=2):
        problem = _not_owned(event, user, sessions, messages, owner_of)
        if problem is not None:
            raise ValidationError(f"line {number}: {problem}")


def _not_owned(event: dict[str, Any], user: str, sessions: set[str], messages: set[str],
               owner_of: Callable[[str], str | None]) -> str | None:
    etype, payload, session = event["type"], event["payload"], event.get("session_id")
    if etype not in DATA_TYPES:
        return f"a {etype} event is not a user's data (an export holds turns, summaries, " \
               "facts and documents)"
    ids = [session, *(payload.get(k) for k in MAPPED)]
    if any(isinstance(i, str) and tenants.SEPARATOR in i for i in ids):
        return "an id holds a control character"
    if payload.get("user_id", user) != user:
        return f"its user is {payload.get('user_id')!r}, not the file's {user!r}"
    if etype == "message.embedded":
        return None if payload.get("message_id") in messages else \
            "a vector for a turn the file does not hold"
    if etype.startswith(("fact.", "document.")):
        return None if payload.get("user_id") == user else "global data, no user's"
    return _session_problem(event, user, sessions, messages, owner_of)


def _session_problem(event: dict[str, Any], user: str, sessions: set[str],
                     messages: set[str], owner_of: Callable[[str], str | None]) -> str | None:
    session, payload = event.get("session_id"), event["payload"]
    if not isinstance(session, str):
        return "a turn or summary of no session"
    if session not in sessions:
        owner = owner_of(session)
        if owner not in (None, user) or (owner is None and payload.get("user_id") != user):
            return f"session {session!r} is not {user!r}'s (its first turn must name the " \
                   "user, and the session must be new or already theirs)"
        sessions.add(session)
    messages.update(str(payload[k]) for k in MESSAGE_IDS if isinstance(payload.get(k), str))
    return None


def renamed(event: dict[str, Any], name: Any) -> dict[str, Any]:
    """``event`` with its session, user and agent ids passed through ``name``."""
    payload = {k: name(v) if k in MAPPED and isinstance(v, str) else v
               for k, v in event["payload"].items()}
    session = event.get("session_id")
    return {**event, "session_id": None if session is None else name(session),
            "payload": payload}


def rekeyed(event: dict[str, Any], tenant: str) -> dict[str, Any]:
    """``event`` with new event and message ids of its own in ``tenant``."""
    def new(old: str) -> str:
        return str(uuid.uuid5(_IDS, f"{tenant}{tenants.SEPARATOR}{old}"))
    payload = {k: new(v) if k in MESSAGE_IDS and isinstance(v, str) else v
               for k, v in event["payload"].items()}
    if isinstance(payload.get("source_ids"), list):
        payload["source_ids"] = [new(s) for s in payload["source_ids"]]
    return {**event, "id": new(event["id"]), "payload": payload}


def _digest(event: dict[str, Any]) -> str:
    return hashlib.sha256(orjson.dumps(event, option=orjson.OPT_SORT_KEYS)).hexdigest()


def _json(number: int, line: bytes) -> dict[str, Any]:
    try:
        data = orjson.loads(line)
    except orjson.JSONDecodeError as exc:
        raise ValidationError(f"line {number}: not JSON ({exc})") from None
    if not isinstance(data, dict):
        raise ValidationError(f"line {number}: not a JSON object")
    return data


def _header(data: dict[str, Any]) -> dict[str, Any]:
    version = data.get("memq_export")
    if not isinstance(version, int) or isinstance(version, bool):
        raise ValidationError("line 1: not a memq export (no memq_export version)")
    if version != VERSION:
        raise ValidationError(f"line 1: export version {version}; this memq reads version "
                              f"{VERSION}")
    if not isinstance(data.get("user_id"), str) or not isinstance(data.get("tenant"), str):
        raise ValidationError("line 1: the header names no user_id and tenant")
    return data


def _event(number: int, data: dict[str, Any]) -> dict[str, Any]:
    event = data.get("event")
    if not isinstance(event, dict) or not isinstance(event.get("payload"), dict) or \
            not isinstance(event.get("type"), str) or not isinstance(event.get("id"), str):
        raise ValidationError(f"line {number}: not an event line")
    if data.get("sha256") != _digest(event):
        raise ValidationError(f"line {number}: its content does not match its digest: the "
                              "line was changed after the export")
    return event


def _check_manifest(number: int, manifest: Any, events: list[dict[str, Any]],
                    digest: str) -> None:
    if not isinstance(manifest, dict):
        raise ValidationError(f"line {number}: the manifest is not an object")
    if manifest.get("events") != len(events):
        raise ValidationError(f"line {number}: the manifest counts {manifest.get('events')}"
                              f" events, the file holds {len(events)}: lines were lost or "
                              "added")
    if manifest.get("counts") != dict(Counter(e["type"] for e in events)):
        raise ValidationError(f"line {number}: the manifest's counts by type do not match "
                              "the events the file holds")
    if manifest.get("sha256") != digest:
        raise ValidationError(f"line {number}: the manifest's digest does not match the "
                              "lines before it: lines were reordered, replaced or added")
