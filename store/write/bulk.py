"""Inserting many rows with one statement: the rows travel as a JSON array.

``executemany`` steps once per row, and each step hands the GIL back and forth; the
writer's inbox prefetcher, which needs the GIL too, then slows every row down. One
``INSERT ... SELECT ... FROM json_each(?)`` per chunk is one call into SQLite, which runs
without the GIL. SQLite's JSON reads back exactly what orjson wrote (text, integers and
floats round-trip bit for bit), so a row is the same as one bound by ``execute``.

Chunks stay under :data:`MAX_CHUNK_BYTES`, far below SQLite's limit on one value
(``SQLITE_MAX_LENGTH``, 1 GB), whatever the events' sizes.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Sequence
from typing import Any

import apsw
import orjson

MAX_CHUNK_BYTES = 8 * 1024 * 1024


def select_columns(count: int) -> str:
    """``value ->> 0, value ->> 1, ...``: the columns of one JSON row, typed as SQL values."""
    return ", ".join(f"value ->> {i}" for i in range(count))


def insert(cur: apsw.Cursor, sql: str, rows: Iterable[Sequence[Any]], *params: Any) -> None:
    """Run ``sql`` once per chunk of ``rows``, bound as ``?1`` (then ``params`` as ?2, ...).

    ``sql`` reads its rows with ``FROM json_each(?1)``.
    """
    for chunk in chunks(rows):
        cur.execute(sql, (chunk, *params))


def chunks(rows: Iterable[Sequence[Any]], max_bytes: int = MAX_CHUNK_BYTES) -> Iterator[str]:
    """JSON arrays of rows, each under ``max_bytes`` (a single larger row goes alone)."""
    parts: list[bytes] = []
    size = 2
    for row in rows:
        part = orjson.dumps(row)
        if parts and size + len(part) + 1 > max_bytes:
            yield _array(parts)
            parts, size = [], 2
        parts.append(part)
        size += len(part) + 1
    if parts:
        yield _array(parts)


def _array(parts: list[bytes]) -> str:
    # Text, not bytes: SQLite would take a BLOB argument for its binary JSONB format.
    return (b"[" + b",".join(parts) + b"]").decode()
