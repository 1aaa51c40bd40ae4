"""Many rows in one statement: exactly the values ``execute`` would have stored."""

from __future__ import annotations

import random

import apsw
import orjson
import pytest

from memq import MemoryClient
from memq.config import Config
from memq.store import rebuild
from memq.store.write import bulk

HOSTILE_TEXTS = [
    "", " ", "plain", 'quote " and backslash \\ and slash /', "tab\tnew\nline\rreturn",
    "\x01\x1f control", "\u2028\u2029 line separators", "emoji 😀 👩‍👩‍👧 astral 𝔘",
    "RTL שלום عربى", "combining e\u0301", "json-looking [1, {\"a\": null}]", "\\u0000 escaped",
    "x" * 100_000,
]
NUMBERS = [0, 1, -1, 2**63 - 1, -(2**63), 0.0, -0.0, 0.1, 1 / 3, 1e300, 5e-324, 0.5, 1.0]


def roundtrip(rows: list[tuple[object, ...]]) -> list[tuple[object, ...]]:
    conn = apsw.Connection(":memory:")
    conn.execute("CREATE TABLE t (a ANY, b ANY) STRICT")
    bulk.insert(conn.cursor(), f"INSERT INTO t SELECT {bulk.select_columns(2)} "
                "FROM json_each(?1)", rows)
    return list(conn.execute("SELECT a, b FROM t ORDER BY rowid"))


def test_texts_come_back_exactly() -> None:
    rows = [(text, None) for text in HOSTILE_TEXTS]
    assert roundtrip(rows) == rows


def test_numbers_come_back_exactly_with_their_types() -> None:
    rng = random.Random(3)
    floats = [rng.uniform(-1, 1) * 10 ** rng.randint(-300, 300) for _ in range(5000)]
    rows = [(n, None) for n in NUMBERS + floats]
    back = roundtrip(rows)
    assert back == rows
    assert [type(a) for a, _ in back] == [type(n) for n, _ in rows]


def test_rows_are_cut_into_chunks_under_the_limit_in_order() -> None:
    rows = [(i, "y" * 50) for i in range(100)]
    chunks = list(bulk.chunks(rows, max_bytes=500))
    assert len(chunks) > 10
    assert all(len(chunk.encode()) <= 500 for chunk in chunks)
    assert [tuple(r) for chunk in chunks for r in orjson.loads(chunk)] == rows


def test_a_row_over_the_limit_goes_alone_and_nothing_is_empty() -> None:
    rows = [(1, "small"), (2, "z" * 1000), (3, "small")]
    chunks = [orjson.loads(c) for c in bulk.chunks(rows, max_bytes=100)]
    assert chunks == [[[1, "small"]], [[2, "z" * 1000]], [[3, "small"]]]
    assert list(bulk.chunks([], max_bytes=100)) == []


def test_many_chunks_insert_every_row(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(bulk, "MAX_CHUNK_BYTES", 1000)
    rows = [(i, f"row {i}") for i in range(2000)]
    assert roundtrip(rows) == rows


@pytest.mark.redis
def test_hostile_appends_through_the_writer_equal_a_rebuild(
    client: MemoryClient, config: Config
) -> None:
    texts = [*HOSTILE_TEXTS[2:-1], "x" * 60_000] * 3
    importances = [0.0, 0.1, 1 / 3, 0.5, 1.0, 0.7]
    with client.batched():  # one batch: the writer's bulk path
        ids = [client.append(f"s{i % 3}", "user", text, importance=importances[i % 6])
               for i, text in enumerate(texts)]
    client.flush()
    assert rebuild.check(config.db_path) == []
    conn = apsw.Connection(config.db_path, flags=apsw.SQLITE_OPEN_READONLY)
    stored = dict(conn.execute("SELECT id, content FROM messages"))
    assert [stored[mid] for mid in ids] == texts
    payloads = [orjson.loads(p)["content"] for (p,) in conn.execute(
        "SELECT payload FROM events WHERE type = 'message.appended' ORDER BY seq")]
    assert payloads == texts
    importance = dict(conn.execute("SELECT id, importance FROM messages"))
    assert [importance[mid] for mid in ids] == [importances[i % 6] for i in range(len(ids))]
