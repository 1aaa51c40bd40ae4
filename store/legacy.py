"""Upgrade from the seed's layout: every row of its five tables becomes one event.

The seed kept its state in ``messages``, ``facts``, ``macros``, ``scheduled_tasks`` and
``terminal_allowed_prefixes``, with no event log. The schema migrations rename each of
them ``legacy_<name>`` (kept, never dropped), then import them:

=============================  ==================  ====================================
legacy table                   event               kept
=============================  ==================  ====================================
``messages``                   message.imported    every column (importance, embedding,
                                                   embedding_error, consolidated_at...)
``facts``                      fact.imported       id, source, created_at, updated_at
``macros``                     macro.imported      id, confidence, used_count, next_args,
                                                   created_at, updated_at
``scheduled_tasks``            task.imported       schedule, cron, paused, trusted,
                                                   one-shot, next_run_at, last_run_at...
``terminal_allowed_prefixes``  prefix.allowed      the approval (and its created_at)
=============================  ==================  ====================================

Event ids are derived from the table and the row's key (UUIDv5), so an interrupted
upgrade (the migrations run in one transaction, rolled back whole) or a repeated one
cannot import a row twice. A row memq cannot take (an unknown role, a task id RQ cannot
carry, a time that is not a time) stops the upgrade with a :class:`MigrationError`
naming the row and the problem; the database is left as it was, so fix or delete that
row in the seed's own table and migrate again. Times are stored in memq's form
(RFC3339, UTC); a text without an offset in SQLite's own ``YYYY-MM-DD HH:MM:SS`` form,
which ``CURRENT_TIMESTAMP`` writes, is UTC. Legacy tasks had no time zone: their cron
expressions are read in UTC.
"""

from __future__ import annotations

import base64
import logging
import re
import uuid
from collections.abc import Callable
from contextvars import ContextVar
from datetime import UTC, datetime
from typing import Any

import apsw
import numpy as np
import orjson

from memq.approvals import normalize_prefix
from memq.clock import normalize_rfc3339, now_rfc3339, to_rfc3339
from memq.config import DEFAULT_MODEL_NAME, LimitsConfig
from memq.errors import MigrationError, ValidationError
from memq.events import (
    MAX_EMBEDDING_DIM,
    Event,
    EventType,
    check_characters,
    check_identifier,
    checked_payload,
)
from memq.printable import shown
from memq.store.effects import Effects
from memq.store.projections import record_event
from memq.store.vectors import FLOAT32_LE

logger = logging.getLogger("memq.migrate")

ImportProgress = Callable[[str, int, int], None]
"""Called with (legacy table, its rows imported so far, its rows in total)."""

MAX_LEGACY_ID_CHARS = 10_000
"""The longest seed id taken: the seed set no limit, and its ids only have to be sane."""

import_progress: ContextVar[ImportProgress | None] = ContextVar("import_progress", default=None)
"""Set by ``memq migrate`` to draw a progress bar; migrations take only a cursor."""

PROGRESS_EVERY = 1000
"""Rows between two progress reports."""

LEGACY_NAMESPACE = uuid.UUID("5b0f3c52-9a3e-4c1e-8f1e-6d2a4f0c7b11")

LEGACY_TABLES = ("messages", "facts", "macros", "scheduled_tasks", "terminal_allowed_prefixes")
"""The seed's tables, in the order they are imported."""

LEGACY_TZ = "UTC"
"""The seed's tasks had no time zone column; their cron expressions are read in UTC."""

# Legacy rows were written without memq's limits; do not refuse a long old message.
_IMPORT_LIMITS = LimitsConfig(max_content_bytes=1 << 30, max_payload_bytes=1 << 31)

_SQLITE_TIME = re.compile(r"\d{4}-\d{2}-\d{2} \d{2}:\d{2}:\d{2}(\.\d{1,6})?")

RowEvent = Callable[[dict[str, Any], str], Event]
"""Turns one legacy row (column -> value) into its event; the second argument is now."""


def legacy_table(name: str) -> str:
    return f"legacy_{name}"


def legacy_event_id(row_id: str, table: str = "messages") -> str:
    """The event id of one legacy row: the same on every run of the upgrade."""
    kind = "message" if table == "messages" else table
    return str(uuid.uuid5(LEGACY_NAMESPACE, f"legacy-{kind}:{row_id}"))


def import_legacy_messages(cur: apsw.Cursor) -> int:
    """Turn every row of ``legacy_messages`` into an event and its projection row."""
    return import_table(cur, "messages")


def import_legacy_tables(cur: apsw.Cursor) -> int:
    """Import the seed's other four tables, those that are there; returns the events."""
    return sum(import_table(cur, table) for table in LEGACY_TABLES[1:])


def import_table(cur: apsw.Cursor, table: str) -> int:
    """Record one event per row of ``legacy_<table>`` (if there is one), in rowid order."""
    source = legacy_table(table)
    if not _has_table(cur, source):
        return 0
    columns = _seed_columns(cur, table)
    selected = ", ".join(quoted(column) for column in columns)
    rows = cur.execute(
        f"SELECT rowid, {selected} FROM {quoted(source)} ORDER BY rowid").fetchall()
    recorded_at = now_rfc3339()
    effects = Effects()  # jobs for these rows come from the writer's reconcile passes
    report = import_progress.get()
    seen: set[str] = set()
    count = 0
    for done, (rowid, *values) in enumerate(rows, 1):
        row = dict(zip(columns, values, strict=True))
        _check_key(table, rowid, row, seen)
        count += _record(cur, table, row, _row_event(table, row, recorded_at), recorded_at,
                         effects)
        if report is not None and (done % PROGRESS_EVERY == 0 or done == len(rows)):
            report(table, done, len(rows))
    return count


SEED_COLUMNS: dict[str, frozenset[str]] = {
    "messages": frozenset({
        "id", "session_id", "role", "content", "tool_call_id", "tool_name",
        "tool_calls_json", "created_at", "importance", "embedding", "embedding_error",
        "consolidated_at"}),
    "facts": frozenset({"id", "category", "key", "value", "source", "created_at",
                        "updated_at"}),
    "macros": frozenset({"id", "trigger_tool", "trigger_args_pattern", "next_tool",
                         "next_args", "confidence", "used_count", "created_at", "updated_at"}),
    "scheduled_tasks": frozenset({
        "id", "name", "cron_expr", "original_schedule", "prompt", "source", "is_oneshot",
        "is_paused", "is_trusted", "next_run_at", "last_run_at", "created_at", "updated_at",
        "tz"}),
    "terminal_allowed_prefixes": frozenset({"prefix", "created_at"}),
}
"""The columns of the seed's tables that memq reads (``tz`` and a prefix's
``created_at`` are optional); a legacy table with any other is refused."""


def _seed_columns(cur: apsw.Cursor, table: str) -> list[str]:
    """The columns of ``legacy_<table>``, all of them the seed's: a file with another is
    not the seed's layout, and is refused with that column named."""
    source = legacy_table(table)
    columns = [str(r[1]) for r in cur.execute(f"PRAGMA table_info({quoted(source)})")]
    unknown = [column for column in columns if column not in SEED_COLUMNS[table]]
    if unknown:
        raise MigrationError(
            f"{table} has a column the seed's layout does not: {shown(unknown[0])} "
            f"(memq reads {', '.join(sorted(SEED_COLUMNS[table]))}); nothing was changed")
    return columns


def quoted(identifier: str) -> str:
    """An SQL identifier as SQLite reads it whatever it holds: a name read from a file is
    never SQL."""
    return '"' + identifier.replace('"', '""') + '"'


def _check_key(table: str, rowid: object, row: dict[str, Any], seen: set[str]) -> None:
    """A row without a key, or with one an earlier row has, would import as a duplicate of
    nothing or of that row (its event id comes from the key): stop, naming it, rather than
    import half the table."""
    key = row.get("id", row.get("prefix"))
    if key is None or key == "":
        raise _unimportable(table, row, f"row {rowid} has no {_key_name(table)}")
    if str(key) in seen:
        raise _unimportable(table, row, f"row {rowid} has the {_key_name(table)} of an "
                                        "earlier row")
    seen.add(str(key))


def _key_name(table: str) -> str:
    return "prefix" if table == "terminal_allowed_prefixes" else "id"


def drop_triggers_and_views(cur: apsw.Cursor) -> list[str]:
    """Drop every trigger and view of a legacy file before anything else runs on it: the
    seed made none, and one would run (or shadow a name) inside memq's own schema."""
    found = [(str(kind), str(name)) for kind, name in cur.execute(
        "SELECT type, name FROM sqlite_master WHERE type IN ('trigger', 'view')")]
    for kind, name in found:
        cur.execute(f"DROP {kind.upper()} IF EXISTS {quoted(name)}")
    if found:
        logger.warning("legacy file: dropped %s", ", ".join(f"{k} {n}" for k, n in found))
    return [name for _, name in found]


def _row_event(table: str, row: dict[str, Any], now: str) -> Event:
    try:
        return _ROW_EVENTS[table](row, now)
    except KeyError as exc:  # a column the seed documents is not there
        raise _unimportable(table, row, f"it has no column {exc}") from exc
    except (TypeError, ValueError) as exc:  # e.g. an importance that is not a number
        raise _unimportable(table, row, exc) from exc


def _record(cur: apsw.Cursor, table: str, row: dict[str, Any], event: Event,
            recorded_at: str, effects: Effects) -> int:
    try:
        return int(record_event(cur, event, recorded_at, effects))
    except ValidationError as exc:  # the applier refused it: an InvalidEvent
        raise _unimportable(table, row, exc) from exc


def _unimportable(table: str, row: dict[str, Any], problem: object) -> MigrationError:
    key = row.get("id", row.get("prefix"))
    key = "(without a key)" if key is None or key == "" else key
    what = {"messages": "message", "facts": "fact", "macros": "macro",
            "scheduled_tasks": "task", "terminal_allowed_prefixes": "approval"}[table]
    return MigrationError(
        f"legacy {what} {key} cannot be imported: {problem} (the upgrade was rolled back: "
        f"fix or delete that row in {table}, then migrate again)"
    )


def _event(table: str, row: dict[str, Any], etype: str, payload: dict[str, Any], *,
           created_at: str, session_id: str | None = None, key: str | None = None) -> Event:
    try:
        payload = checked_payload(etype, payload, _IMPORT_LIMITS)
    except ValidationError as exc:
        raise _unimportable(table, row, exc) from exc
    return Event(id=legacy_event_id(str(row["id"]) if key is None else key, table),
                 type=etype, session_id=session_id, created_at=created_at, payload=payload)


def legacy_time(value: Any, what: str) -> str:
    """A legacy timestamp in memq's form: RFC3339, or SQLite's offset-less UTC text."""
    text = str(value) if value is not None else ""
    if _SQLITE_TIME.fullmatch(text):
        return to_rfc3339(datetime.fromisoformat(text).replace(tzinfo=UTC))
    return normalize_rfc3339(text, what=what)


def _times(table: str, row: dict[str, Any], *names: str) -> dict[str, Any]:
    """The named timestamp columns of ``row`` in memq's form; NULL stays NULL."""
    times = {}
    for name in names:
        try:
            times[name] = None if row.get(name) is None else legacy_time(row[name], name)
        except ValidationError as exc:
            raise _unimportable(table, row, exc) from exc
    return times


# -- messages -----------------------------------------------------------------------------


def _message_event(row: dict[str, Any], now: str) -> Event:
    times = _times("messages", row, "created_at", "consolidated_at")
    payload = {**_message_payload(row), **times}
    return _event("messages", row, EventType.MESSAGE_IMPORTED, payload,
                  created_at=times["created_at"] or now,
                  session_id=identifier(row, "session_id"))


def identifier(row: dict[str, Any], column: str) -> str:
    """A seed's text id as memq takes one: text (a blob or a number is not made into
    one), not blank, without a control character. The tenants' separator is one: the
    seed had no tenants, and a file must not place its rows in one."""
    value = row[column]
    if not isinstance(value, str):
        raise ValueError(f"its {column} is not text ({type(value).__name__})")
    check_identifier(column, value, max_chars=MAX_LEGACY_ID_CHARS)
    check_characters(column, value)  # the whole id: check_identifier reads a tenant's part
    return value


def _message_payload(row: dict[str, Any]) -> dict[str, Any]:
    """The row's columns but its timestamps (:func:`_times` reads those)."""
    embedding = row.get("embedding")
    payload: dict[str, Any] = {
        "message_id": identifier(row, "id"),
        "role": row["role"],
        "content": row["content"] if row["content"] is not None else "",
        "importance": 0.5 if row.get("importance") is None else float(row["importance"]),
        "tool_call_id": row.get("tool_call_id"),
        "tool_name": row.get("tool_name"),
        "tool_calls_json": row.get("tool_calls_json"),
        "embedding_error": row.get("embedding_error"),
    }
    vector = legacy_vector(row, embedding)
    if isinstance(vector, str):
        payload["embedding_json"] = vector
    elif isinstance(vector, bytes):
        payload["embedding_b64"] = base64.b64encode(vector).decode("ascii")
        payload["embedding_dim"] = len(vector) // FLOAT32_LE.itemsize
    if vector is not None:
        # The legacy system embedded with the same model memq defaults to.
        payload["embedding_model"] = DEFAULT_MODEL_NAME
    return payload


def legacy_vector(row: dict[str, Any], value: Any) -> bytes | str | None:
    """A legacy embedding as JSON text or float32 bytes, told apart by what it holds, not
    by its column's type: the seed wrote JSON arrays into a BLOB column. One that is
    neither is dropped and reported (the message is embedded again), never an abort."""
    if value is None:
        return None
    text = _utf8(value)
    if text is not None and text.lstrip().startswith("["):
        problem = _json_vector_problem(text)
        if problem is None:
            return text
    elif isinstance(value, bytes):
        problem = _blob_vector_problem(value)
        if problem is None:
            return value
    else:
        problem = f"a {type(value).__name__}, neither JSON nor float32 bytes"
    logger.warning("legacy message %s: its embedding is dropped (%s); it will be embedded "
                   "again", row.get("id"), problem)
    return None


def _utf8(value: Any) -> str | None:
    if isinstance(value, str):
        return value
    if isinstance(value, bytes):
        try:
            return value.decode("utf-8")
        except UnicodeDecodeError:
            return None
    return None


def _json_vector_problem(text: str) -> str | None:
    try:
        numbers = orjson.loads(text)
    except orjson.JSONDecodeError as exc:
        return f"JSON that does not parse: {exc}"
    if not isinstance(numbers, list) or not all(
            isinstance(n, (int, float)) and not isinstance(n, bool) for n in numbers):
        return "JSON that is not a list of numbers"
    return _numbers_problem(np.asarray(numbers, dtype=np.float64))


def _blob_vector_problem(blob: bytes) -> str | None:
    if len(blob) % FLOAT32_LE.itemsize:
        return f"{len(blob)} bytes, not a whole number of float32s"
    return _numbers_problem(np.frombuffer(blob, dtype=FLOAT32_LE))


def _numbers_problem(vector: np.ndarray) -> str | None:
    if not 1 <= len(vector) <= MAX_EMBEDDING_DIM:
        return f"{len(vector)} numbers, not 1-{MAX_EMBEDDING_DIM}"
    with np.errstate(over="ignore"):
        if not np.isfinite(vector.astype(np.float32)).all():
            return "numbers that are not finite float32s"
    return None


# -- facts, macros, tasks, approvals ------------------------------------------------------


def _fact_event(row: dict[str, Any], now: str) -> Event:
    times = _times("facts", row, "created_at", "updated_at")
    payload = {"fact_id": row["id"], "category": row["category"], "key": row["key"],
               "value": row["value"], "source": row["source"], **times}
    return _event("facts", row, EventType.FACT_IMPORTED, payload,
                  created_at=times["updated_at"] or now)


def _macro_event(row: dict[str, Any], now: str) -> Event:
    times = _times("macros", row, "created_at", "updated_at")
    payload = {
        "macro_id": row["id"], "trigger_tool": row["trigger_tool"],
        "trigger_args_pattern": row["trigger_args_pattern"], "next_tool": row["next_tool"],
        "next_args": row.get("next_args"),
        "confidence": 0.0 if row.get("confidence") is None else row["confidence"],
        "used_count": 0 if row.get("used_count") is None else row["used_count"], **times,
    }
    return _event("macros", row, EventType.MACRO_IMPORTED, payload,
                  created_at=times["updated_at"] or now)


def _task_event(row: dict[str, Any], now: str) -> Event:
    times = _times("scheduled_tasks", row, "next_run_at", "last_run_at", "created_at",
                   "updated_at")
    payload = {
        "task_id": None if row["id"] is None else identifier(row, "id"), "name": row["name"],
        "schedule": row["original_schedule"], "cron_expr": row["cron_expr"],
        "prompt": row["prompt"], "source": row["source"], "tz": row.get("tz") or LEGACY_TZ,
        **{flag: _flag(row.get(f"is_{flag}")) for flag in ("oneshot", "paused", "trusted")},
        **times,
    }
    return _event("scheduled_tasks", row, EventType.TASK_IMPORTED, payload,
                  created_at=times["updated_at"] or now)


def _prefix_event(row: dict[str, Any], now: str) -> Event:
    try:
        prefix = normalize_prefix(row["prefix"])
    except ValidationError as exc:
        raise _unimportable("terminal_allowed_prefixes", row, exc) from exc
    created_at = _times("terminal_allowed_prefixes", row, "created_at").get("created_at")
    return _event("terminal_allowed_prefixes", row, EventType.PREFIX_ALLOWED,
                  {"prefix": prefix}, created_at=created_at or now, key=str(row["prefix"]))


def _flag(value: Any) -> Any:
    """SQLite's 0/1 (or NULL, the column default of 0) as a bool; anything else is left
    for the schema to refuse."""
    if value is None or value in (0, 1):
        return bool(value)
    return value


_ROW_EVENTS: dict[str, RowEvent] = {
    "messages": _message_event,
    "facts": _fact_event,
    "macros": _macro_event,
    "scheduled_tasks": _task_event,
    "terminal_allowed_prefixes": _prefix_event,
}


def _has_table(cur: apsw.Cursor, name: str) -> bool:
    row = cur.execute(
        "SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = ?", (name,)
    ).fetchone()
    return row is not None
