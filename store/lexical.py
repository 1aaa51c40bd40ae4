"""The lexical index of message content, ``messages_fts`` (searched in ``read/lexical.py``).

The appliers that insert messages call :func:`index` in the writer's transaction, so the
index and ``messages`` never disagree (migration ``0021_fts_external_content`` indexed
what was there before; an applier that deletes messages calls :func:`unindex` first).
Besides the content, each message has one token for its session, its user and its agent,
so a search stays inside its scope in FTS5. The index keeps no copy of the text: it reads
it from ``messages`` through the view ``messages_fts_source``, which makes the same
tokens as :func:`index` (an external-content table; :func:`check` verifies they agree).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable, Sequence

import apsw
import orjson

from memq.store.write import bulk

_INDEX = f"""
    INSERT INTO messages_fts (rowid, content, session, user, agent)
    SELECT {bulk.select_columns(5)} FROM json_each(?1)"""

Indexed = tuple[int, str, str, str | None, str | None]
"""A message to index: (seq, session_id, content, user_id, agent_id)."""


def index(cur: apsw.Cursor, rows: Iterable[Indexed]) -> None:
    """Index messages, in the caller's transaction."""
    bulk.insert(cur, _INDEX, (
        (seq, content, session_token(session_id), _optional(user_token, user_id),
         _optional(agent_token, agent_id))
        for seq, session_id, content, user_id, agent_id in rows))


IN_PLACE_SHARE = 0.01
"""Unindexing at most this share of the indexed messages deletes their words in place;
more, and the whole index is merged once instead (see :func:`unindex`)."""

_COUNT_UP_TO = "SELECT count(*) FROM (SELECT 1 FROM messages LIMIT ?)"
_DELETE = "DELETE FROM messages_fts WHERE rowid IN (SELECT value FROM json_each(?))"
_SECURE_DELETE = "INSERT INTO messages_fts (messages_fts, rank) VALUES ('secure-delete', ?)"


def unindex(cur: apsw.Cursor, seqs: Sequence[int]) -> None:
    """Take messages (by seq) out of the index, leaving none of their words in it.

    Call it while the messages are still in ``messages``: the index reads their text back
    (through ``messages_fts_source``) to find their words. A few messages are deleted in
    place (FTS5's 'secure-delete', turned on for these deletes only: it also slows every
    insert, see migration 0036): ~0.5-1.5 ms a message here, whatever the index's size.
    Rewriting the whole index ('optimize') costs ~0.1 s per 30,000 indexed messages: so
    beyond IN_PLACE_SHARE of them (a user's history, a retention pass) the words are
    dropped by merging the index into one segment instead.
    """
    if not seqs:
        return
    # Counted only as far as the answer needs (one row past the share's bound): forgetting
    # one message reads ~100 rows, not every message of a large database.
    bound = math.ceil(len(seqs) / IN_PLACE_SHARE) + 1 if IN_PLACE_SHARE > 0 else 0
    (indexed,) = cur.execute(_COUNT_UP_TO, (bound,)).fetchone() or (0,)
    if len(seqs) <= IN_PLACE_SHARE * int(indexed):
        cur.execute(_SECURE_DELETE, (1,))
        cur.execute(_DELETE, (orjson.dumps(list(seqs)).decode(),))
        # FTS5 writes its pending changes out before it takes a new setting: the deletes
        # above are made in place, with the setting they were made under.
        cur.execute(_SECURE_DELETE, (0,))
    else:
        cur.execute(_DELETE, (orjson.dumps(list(seqs)).decode(),))
        cur.execute("INSERT INTO messages_fts (messages_fts) VALUES ('optimize')")


TIDY_PAGES = 200
"""Leaf pages one step of :func:`tidy` writes at most: 4-8 ms here, commit included."""


def tidy(cur: apsw.Cursor) -> bool:
    """One bounded step of merging the index's segments, in the caller's transaction;
    whether it did any work (none: the index is as merged as it gets until more is added).

    Each batch that indexes messages adds a segment, and FTS5 merges them only four at a
    level: a forget's in-place delete seeks every word of a message in every segment, so
    it cost ~3x more with the ten segments 20,000 turns left than with one or two
    (bench/forget_stall.py). Migration 0034 lets a level of two be merged; the writer
    calls this while no batch waits, taking turns with a forget's steps
    (``Writer.upkeep``).
    """
    conn = cur.getconnection()
    before = conn.total_changes()
    cur.execute("INSERT INTO messages_fts (messages_fts, rank) VALUES ('merge', ?)",
                (TIDY_PAGES,))
    # FTS5's documented signal: fewer than two changes, and the command found nothing.
    return conn.total_changes() - before >= 2


_VOCABULARY = "messages_fts_vocabulary"
CONTENT_QUERIES = (
    f"SELECT term, col, doc, cnt FROM temp.{_VOCABULARY} ORDER BY term, col",
    "SELECT id, sz FROM messages_fts_docsize ORDER BY id",
)
"""What the index holds, as two ordered lists: each word's messages and occurrences per
column, and each message's token counts. Logical, so the same whatever the index's
segments (merged or not, deleted in place or not): two databases whose messages are the
same give the same rows, and a forgotten message's words left behind show as a count
that differs. Read them after :func:`open_vocabulary`."""


def open_vocabulary(conn: apsw.Connection) -> None:
    """Make :data:`CONTENT_QUERIES` readable on ``conn``, a read-only connection too."""
    # query_only refuses even a temporary table; this one writes nothing to the file.
    guarded = conn.pragma("query_only")
    conn.pragma("query_only", False)
    try:
        conn.execute(f"CREATE VIRTUAL TABLE IF NOT EXISTS temp.{_VOCABULARY} "
                     "USING fts5vocab(main, messages_fts, 'col')")
    finally:
        conn.pragma("query_only", guarded)


def check(cur: apsw.Cursor) -> str | None:
    """FTS5's own check of the index against the messages' text; what it found, if anything."""
    try:
        cur.execute("INSERT INTO messages_fts (messages_fts, rank) VALUES ('integrity-check', 1)")
    except apsw.Error as exc:  # CorruptError for a mismatch
        return str(exc)
    return None


def clear(cur: apsw.Cursor) -> None:
    """Empty the index (a rebuild refills it by replaying the log)."""
    cur.execute("INSERT INTO messages_fts (messages_fts) VALUES ('delete-all')")


def session_token(session_id: str) -> str:
    """The token the index stores for a session: 's', the hex of its UTF-8, 'x'.

    Hex alone could be split by the tokenizer or stemmed (it may end in "ed"); no Porter
    rule strips an 'x'. Migrations 0007 and 0013 compute the same in SQL.
    """
    return _token("s", session_id)


def user_token(user_id: str) -> str:
    """The token the index stores for a message's user: 'u', the hex of its UTF-8, 'x'."""
    return _token("u", user_id)


def agent_token(agent_id: str) -> str:
    """The token the index stores for a message's agent: 'a', the hex of its UTF-8, 'x'."""
    return _token("a", agent_id)


def _token(prefix: str, value: str) -> str:
    return f"{prefix}{value.encode('utf-8', 'surrogatepass').hex().upper()}x"


def _optional(token: Callable[[str], str], value: str | None) -> str | None:
    return None if value is None else token(value)


