"""Test helper: a real database driven through the writer's own batch code, without Redis."""

from __future__ import annotations

import itertools
from pathlib import Path
from typing import Any

import apsw

from memq import names
from memq.clock import uuid7
from memq.config import Config
from memq.events import Event, encode
from memq.store import rebuild, schema
from memq.store.connection import open_connection
from memq.store.write import batch
from memq.store.write.writer import BatchResult, Writer

_stream_ids = itertools.count(1)
BASE_TIME = "2026-03-01T09:00:00.000000Z"


def at(minute: int) -> str:
    """A fixed, readable timestamp: minutes after BASE_TIME (within one day)."""
    return f"2026-03-01T{9 + minute // 60:02d}:{minute % 60:02d}:00.000000Z"


class EventLog:
    def __init__(self, tmp_path: Path) -> None:
        self.path = str(tmp_path / "memq.db")
        self.conn = open_connection(self.path)
        schema.migrate(self.conn)
        self.writer = Writer(Config(db_path=self.path), self.conn, None)  # type: ignore[arg-type]

    def send(self, *events: Event | bytes, stream: str = names.ADMIN_INBOX_STREAM
             ) -> BatchResult:
        """Apply ``events`` as one batch, as if they came on ``stream`` (admin's: anything)."""
        raws = [e if isinstance(e, bytes) else encode(e) for e in events]
        entries = [batch.Entry(stream, f"{next(_stream_ids)}-0".encode(),
                               {names.EVENT_FIELD: raw}) for raw in raws]
        decoded = batch.decode_entries(entries, self.writer.config.limits)
        return self.writer.apply_batch(decoded, entries[-1].id.decode())

    def erase_steps(self, count: int | None = None) -> int:
        """Run up to ``count`` steps of the forgets erased in steps (all: None), as the
        writer does between batches; how many ran."""
        ran = 0
        while (count is None or ran < count) and self.writer.erase_step():
            ran += 1
        return ran

    def rows(self, sql: str, *params: Any) -> list[tuple[Any, ...]]:
        return [tuple(r) for r in self.conn.execute(sql, params)]

    def rejections(self) -> list[str]:
        return [r[0] for r in self.conn.execute("SELECT reason FROM rejected_events ORDER BY id")]

    def reader(self) -> apsw.Connection:
        return open_connection(self.path, readonly=True)

    def dump(self) -> dict[str, list[tuple[Any, ...]]]:
        return {t: self.rows(f"SELECT * FROM {t} ORDER BY 1, 2") for t in schema.PROJECTION_TABLES}

    def assert_rebuild_equal(self) -> None:
        """`memq rebuild --check` finds nothing, and an in-place rebuild changes no row."""
        assert rebuild.check(self.path) == []
        before = self.dump()
        rebuild._rebuild_in_place(self.conn, None)
        assert self.dump() == before

    def close(self) -> None:
        self.conn.close()


def event(etype: str, payload: dict[str, Any], *, session: str | None = None,
          created_at: str = BASE_TIME, version: int = 0) -> Event:
    """An event to send; ``version`` 0 is its type's current one (an older client's: 1)."""
    return Event(id=uuid7(), type=etype, session_id=session, created_at=created_at,
                 payload=payload, version=version)
