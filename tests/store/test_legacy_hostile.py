"""A legacy file is data, not code: its names are never run as SQL, its triggers and views
are dropped first, every row is imported or the upgrade stops naming it, and an
embedding is read by what it holds.

Before: a column named to close the ``SELECT`` installed a trigger on memq's own event
log; rows sharing an id imported half the table and exited 0; the seed's JSON arrays in
a BLOB column failed the upgrade (or, at a length divisible by four, became garbage).
"""

from __future__ import annotations

import struct
from pathlib import Path

import apsw
import numpy as np
import orjson
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from memq.errors import MigrationError
from memq.store import schema, vectors
from tests.store.test_legacy import MESSAGE_COLUMNS, SEED_SCHEMA, make_seed, upgraded

INJECTION = ('x FROM legacy_messages; CREATE TRIGGER approve AFTER INSERT ON events BEGIN '
             "INSERT INTO terminal_allowed_prefixes (prefix) VALUES ('rm'); END; SELECT id")


def objects(path: Path, kind: str) -> list[str]:
    conn = apsw.Connection(str(path))
    try:
        return [r[0] for r in conn.execute(
            "SELECT name FROM sqlite_master WHERE type = ? ORDER BY name", (kind,))]
    finally:
        conn.close()


def test_a_column_named_to_close_the_select_is_refused_by_name(tmp_path: Path) -> None:
    path = tmp_path / "seed.db"
    make_seed(path)
    conn = apsw.Connection(str(path))
    conn.execute(f'ALTER TABLE messages ADD COLUMN "{INJECTION}" TEXT')
    conn.close()
    with pytest.raises(MigrationError, match="a column the seed's layout does not") as caught:
        upgraded(path)
    assert "CREATE TRIGGER approve" in str(caught.value)
    assert objects(path, "trigger") == []
    assert "events" not in objects(path, "table")  # rolled back whole


@settings(max_examples=40, deadline=None)
@given(name=st.text(st.characters(blacklist_categories=["Cs"], blacklist_characters="\x00"),
                    min_size=1, max_size=80))
def test_any_unknown_column_name_is_refused_never_run(tmp_path_factory: pytest.TempPathFactory,
                                                       name: str) -> None:
    path = tmp_path_factory.mktemp("seed") / "seed.db"
    make_seed(path)
    conn = apsw.Connection(str(path))
    quoted = name.replace('"', '""')
    try:
        conn.execute(f'ALTER TABLE facts ADD COLUMN "{quoted}" TEXT')
    except apsw.SQLError:
        conn.close()
        return  # a name SQLite itself refuses (a duplicate of a seed column)
    conn.close()
    with pytest.raises(MigrationError, match="a column the seed's layout does not"):
        upgraded(path)
    assert objects(path, "trigger") == []


def test_triggers_and_views_of_the_file_are_dropped_before_anything_runs(
    tmp_path: Path,
) -> None:
    path = tmp_path / "seed.db"
    make_seed(path)
    conn = apsw.Connection(str(path))
    conn.execute("""
        CREATE TRIGGER rename_spy AFTER UPDATE ON messages
        BEGIN INSERT INTO terminal_allowed_prefixes (prefix) VALUES ('rm'); END;
        CREATE TRIGGER fact_spy AFTER INSERT ON facts
        BEGIN INSERT INTO terminal_allowed_prefixes (prefix) VALUES ('sudo'); END;
        CREATE VIEW events_view AS SELECT * FROM messages;""")
    conn.close()
    memq = upgraded(path)
    prefixes = {r[0] for r in memq.execute("SELECT prefix FROM terminal_allowed_prefixes")}
    memq.close()
    assert not prefixes & {"rm", "sudo"}
    assert objects(path, "trigger") == []
    assert "events_view" not in objects(path, "view")


def seed_without_keys(path: Path, ids: list[str | None]) -> None:
    conn = apsw.Connection(str(path))
    conn.execute(SEED_SCHEMA.replace("id TEXT PRIMARY KEY, session_id",
                                     "id TEXT, session_id"))
    conn.executemany(
        "INSERT INTO messages (id, session_id, role, content, created_at) "
        "VALUES (?, 's1', 'user', ?, '2024-01-01T00:00:00Z')",
        [(i, f"turn {n}") for n, i in enumerate(ids)])
    conn.close()


@pytest.mark.parametrize(("ids", "problem"), [
    (["a", "b", "a"], "row 3 has the id of an earlier row"),
    (["a", None, "c"], "row 2 has no id"),
    (["a", "", "c"], "row 2 has no id"),
])
def test_a_row_sharing_an_id_or_without_one_stops_the_upgrade(
    tmp_path: Path, ids: list[str | None], problem: str
) -> None:
    path = tmp_path / "seed.db"
    seed_without_keys(path, ids)
    with pytest.raises(MigrationError, match=problem):
        upgraded(path)
    assert "events" not in objects(path, "table")


def seed_with_ids(path: Path, message_id: object, session_id: object) -> None:
    """One turn whose ids are whatever the file holds: without the seed's TEXT affinity,
    SQLite keeps a blob or a number as it is."""
    conn = apsw.Connection(str(path))
    conn.execute(SEED_SCHEMA.replace("id TEXT PRIMARY KEY, session_id TEXT NOT NULL",
                                     "id, session_id"))
    conn.execute("INSERT INTO messages (id, session_id, role, content, created_at) "
                 "VALUES (?, ?, 'user', 'hello', '2024-01-01T00:00:00Z')",
                 (message_id, session_id))
    conn.close()


@pytest.mark.parametrize(("message_id", "session_id", "problem"), [
    ("m1", "acme\x1fs9", "session_id contains a control character"),  # a tenant's stored form
    ("m1", "\x1b[2Jx", "session_id contains a control character"),  # a terminal escape
    ("m1", b"\xff\x00", r"its session_id is not text \(bytes\)"),
    ("m1", 12.5, r"its session_id is not text \(float\)"),
    (b"m3", "s1", r"its id is not text \(bytes\)"),
    ("m1\x1f", "s1", "id contains a control character"),
])
def test_an_id_memq_would_not_take_from_a_caller_stops_the_upgrade(
    tmp_path: Path, message_id: object, session_id: object, problem: str
) -> None:
    """A file once placed a session in tenant acme's names ('acme' + separator + 's9'),
    and turned a blob or a number into an id of its own making."""
    path = tmp_path / "seed.db"
    seed_with_ids(path, message_id, session_id)
    with pytest.raises(MigrationError, match=problem):
        upgraded(path)
    assert "events" not in objects(path, "table")


@settings(max_examples=60, deadline=None)
@given(session_id=st.text(max_size=40))
def test_any_text_session_id_is_imported_as_it_is_or_refused_by_name(
    tmp_path_factory: pytest.TempPathFactory, session_id: str
) -> None:
    path = tmp_path_factory.mktemp("seed") / "seed.db"
    seed_with_ids(path, "m1", session_id)
    controls = any(ord(c) < 32 or 0x7F <= ord(c) <= 0x9F or 0xD800 <= ord(c) <= 0xDFFF
                   for c in session_id)
    if controls or not session_id.strip():
        with pytest.raises(MigrationError, match="legacy message m1 cannot be imported"):
            upgraded(path)
        assert "events" not in objects(path, "table")
        return
    conn = upgraded(path)
    stored = [r[0] for r in conn.execute("SELECT session_id FROM messages")]
    conn.close()
    assert stored == [session_id]


def seed_with_embedding(path: Path, embedding: object) -> None:
    conn = apsw.Connection(str(path))
    conn.execute(SEED_SCHEMA)
    conn.execute("INSERT INTO messages (id, session_id, role, content, created_at, embedding) "
                 "VALUES ('m1', 's1', 'user', 'hi', '2024-01-01T00:00:00Z', ?)", (embedding,))
    conn.close()


def stored_vector(path: Path) -> np.ndarray | None:
    conn = apsw.Connection(str(path))
    try:
        [(value,)] = conn.execute("SELECT embedding FROM messages WHERE id = 'm1'").fetchall()
    finally:
        conn.close()
    return None if value is None else vectors.decode(value)


@pytest.mark.parametrize("size", [384, 3, 4])  # 4 floats of JSON: a length divisible by 4
def test_a_json_array_in_a_blob_column_is_read_as_json(tmp_path: Path, size: int) -> None:
    vector = [round(0.01 * i, 4) for i in range(size)]
    blob = orjson.dumps(vector)
    path = tmp_path / "seed.db"
    seed_with_embedding(path, blob)
    upgraded(path).close()
    got = stored_vector(path)
    assert got is not None
    np.testing.assert_allclose(got, vector, rtol=1e-6)


@pytest.mark.parametrize("embedding", [
    b"\x01\x02\x03",  # not a whole number of float32s
    b'[1, 2, "three"]', b"[1, 2", struct.pack("<2f", float("nan"), 1.0), b"",
])
def test_an_embedding_that_is_neither_is_dropped_not_an_abort(
    tmp_path: Path, embedding: bytes, caplog: pytest.LogCaptureFixture
) -> None:
    path = tmp_path / "seed.db"
    seed_with_embedding(path, embedding)
    conn = upgraded(path)
    [(content, model)] = conn.execute(
        "SELECT content, embedding_model FROM messages WHERE id = 'm1'").fetchall()
    conn.close()
    assert (content, model) == ("hi", None)  # kept, and embedded again by the workers
    assert stored_vector(path) is None
    assert "its embedding is dropped" in caplog.text


def test_the_seed_columns_are_what_the_tests_seed(tmp_path: Path) -> None:
    """The refusal list and the documented layout agree (a new seed column is no refusal)."""
    from memq.store.legacy import SEED_COLUMNS

    assert set(MESSAGE_COLUMNS.replace(" ", "").split(",")) == SEED_COLUMNS["messages"]
    path = tmp_path / "seed.db"
    make_seed(path)
    conn = apsw.Connection(str(path))
    schema.migrate(conn)
    conn.close()
