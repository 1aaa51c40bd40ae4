"""Ordered, recorded migrations. Each is applied together with its record in one transaction.

Append new migrations at the end of :data:`MIGRATIONS`; never edit one that has shipped.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import apsw

from memq.clock import now_rfc3339
from memq.errors import MigrationError


@dataclass(frozen=True)
class Migration:
    name: str
    apply: Callable[[apsw.Cursor], None]


def _event_log(cur: apsw.Cursor) -> None:
    # A database in the legacy layout has a messages table and no event log: move it
    # aside so the import migration can turn every row into an event.
    if _has_table(cur, "messages") and not _has_table(cur, "events"):
        cur.execute("ALTER TABLE messages RENAME TO legacy_messages")
    cur.execute(
        """
        CREATE TABLE events (
            seq         INTEGER PRIMARY KEY,
            event_id    TEXT NOT NULL UNIQUE,
            type        TEXT NOT NULL,
            version     INTEGER NOT NULL,
            session_id  TEXT,
            created_at  TEXT NOT NULL,
            recorded_at TEXT NOT NULL,
            payload     TEXT NOT NULL
        );
        CREATE INDEX events_by_type ON events(type, seq);

        CREATE TABLE rejected_events (
            id          INTEGER PRIMARY KEY,
            stream_id   TEXT NOT NULL,
            raw         BLOB NOT NULL,
            reason      TEXT NOT NULL,
            attempts    INTEGER NOT NULL DEFAULT 1,
            rejected_at TEXT NOT NULL,
            replayed_at TEXT
        );
        """
    )


def _projections(cur: apsw.Cursor) -> None:
    cur.execute(
        """
        CREATE TABLE messages (
            id              TEXT PRIMARY KEY,
            session_id      TEXT NOT NULL,
            role            TEXT NOT NULL CHECK (role IN ('user','assistant','tool','system')),
            content         TEXT NOT NULL,
            tool_call_id    TEXT,
            tool_name       TEXT,
            tool_calls_json TEXT,
            created_at      TEXT NOT NULL,
            importance      REAL NOT NULL DEFAULT 0.5,
            embedding       BLOB,
            embedding_model TEXT,
            embedding_dim   INTEGER,
            embedding_error TEXT,
            consolidated_at TEXT,
            seq             INTEGER NOT NULL,
            embedded_seq    INTEGER
        );
        CREATE INDEX messages_by_session ON messages(session_id, created_at, seq);
        CREATE INDEX messages_by_importance ON messages(session_id, importance);
        CREATE INDEX messages_by_embedded_seq ON messages(embedded_seq)
            WHERE embedded_seq IS NOT NULL;

        CREATE TABLE facts (
            id         INTEGER PRIMARY KEY,
            category   TEXT NOT NULL,
            key        TEXT NOT NULL,
            value      TEXT NOT NULL,
            source     TEXT NOT NULL CHECK (source IN ('agent','user')),
            created_at TEXT NOT NULL,
            updated_at TEXT NOT NULL,
            UNIQUE (category, key)
        );

        CREATE TABLE macros (
            id                   INTEGER PRIMARY KEY,
            trigger_tool         TEXT NOT NULL,
            trigger_args_pattern TEXT NOT NULL,
            next_tool            TEXT NOT NULL,
            next_args            TEXT,
            confidence           REAL NOT NULL DEFAULT 0.0,
            used_count           INTEGER NOT NULL DEFAULT 0,
            created_at           TEXT NOT NULL,
            updated_at           TEXT NOT NULL
        );

        CREATE TABLE scheduled_tasks (
            id                TEXT PRIMARY KEY,
            name              TEXT NOT NULL,
            cron_expr         TEXT NOT NULL,
            original_schedule TEXT NOT NULL,
            prompt            TEXT NOT NULL,
            source            TEXT NOT NULL CHECK (source IN ('tool','config')),
            is_oneshot        INTEGER NOT NULL DEFAULT 0,
            is_paused         INTEGER NOT NULL DEFAULT 0,
            is_trusted        INTEGER NOT NULL DEFAULT 0,
            tz                TEXT NOT NULL DEFAULT 'UTC',
            next_run_at       TEXT,
            last_run_at       TEXT,
            created_at        TEXT NOT NULL,
            updated_at        TEXT NOT NULL
        );

        CREATE TABLE terminal_allowed_prefixes (
            prefix     TEXT PRIMARY KEY,
            created_at TEXT
        );
        """
    )


def _import_legacy(cur: apsw.Cursor) -> None:
    # Imported lazily: the legacy module needs the projection appliers.
    from store.legacy import import_legacy_messages

    if _has_table(cur, "legacy_messages"):
        import_legacy_messages(cur)


def _macro_learning(cur: apsw.Cursor) -> None:
    # The seed's macros columns stay; the counts behind `confidence` are added so it can
    # be recomputed exactly, one row per (trigger, pattern, next tool). Candidate next
    # arguments and each session's last call are projections too (rebuilt from the log).
    cur.execute(
        """
        ALTER TABLE macros ADD COLUMN transition_count INTEGER NOT NULL DEFAULT 0;
        ALTER TABLE macros ADD COLUMN trigger_count INTEGER NOT NULL DEFAULT 0;
        CREATE UNIQUE INDEX macros_by_transition
            ON macros(trigger_tool, trigger_args_pattern, next_tool);

        CREATE TABLE macro_next_args (
            macro_id INTEGER NOT NULL,
            template TEXT NOT NULL,
            count    INTEGER NOT NULL,
            last_seq INTEGER NOT NULL,
            PRIMARY KEY (macro_id, template)
        );

        CREATE TABLE macro_last_calls (
            session_id TEXT PRIMARY KEY,
            tool       TEXT NOT NULL,
            args_json  TEXT NOT NULL,
            seq        INTEGER NOT NULL
        );
        """
    )


def _consolidation(cur: apsw.Cursor) -> None:
    # A source has at most one summary: the primary key is the schema's own guarantee
    # that no message is ever consolidated twice.
    cur.execute(
        """
        CREATE TABLE summary_sources (
            source_id  TEXT PRIMARY KEY,
            summary_id TEXT NOT NULL,
            position   INTEGER NOT NULL
        );
        CREATE INDEX summary_sources_by_summary ON summary_sources(summary_id, position);
        CREATE INDEX messages_unconsolidated ON messages(session_id, created_at, seq)
            WHERE consolidated_at IS NULL;
        """
    )


def _embedding_backlog(cur: apsw.Cursor) -> None:
    # The reconcile pass asks every minute which messages still need a vector from the
    # configured model. These partial indexes answer by seeking, not by scanning every
    # message: rows are ordered by (model, seq), NULL model first (never embedded), and
    # blank messages, which are never embedded, are left out. Queries must repeat these
    # WHERE terms word for word for SQLite to use them (store/embed_backlog.py does).
    cur.execute(
        """
        CREATE INDEX messages_embedding_backlog ON messages(embedding_model, seq)
            WHERE embedding_error IS NULL AND trim(content, char(32, 9, 10, 11, 12, 13)) <> '';
        CREATE INDEX messages_embedding_failed ON messages(seq)
            WHERE embedding_error IS NOT NULL;
        """
    )


def _fts(cur: apsw.Cursor) -> None:
    # The lexical index of message content (store/lexical.py). Contentless (the text
    # stays in `messages` only) and keyed by the message's `seq`, which is stable across
    # `memq rebuild` and VACUUM, unlike the implicit rowid; the unique index makes "one
    # message per event", which the key relies on, the schema's guarantee. The appliers
    # that insert messages index them in the same transaction (not triggers: FTS5 flushes
    # its pending terms at every trigger statement's savepoint; inserts ran 2.5-4 times
    # slower here). `session` holds one token per session, built as
    # store.lexical.session_token does, so a query stays inside its session in FTS5.
    cur.execute(
        """
        CREATE UNIQUE INDEX messages_by_seq ON messages(seq);
        CREATE VIRTUAL TABLE messages_fts USING fts5(
            content, session,
            content = '', contentless_delete = 1,
            tokenize = 'porter unicode61 remove_diacritics 2'
        );
        INSERT INTO messages_fts (rowid, content, session)
            SELECT seq, content, 's' || hex(session_id) || 'x' FROM messages;
        """
    )


def _fact_history_index(cur: apsw.Cursor) -> None:
    # fact_history (store/fact_reads.py) finds one fact's changes in the log by seeking
    # here, not by decoding every fact event ever sent. Partial: only fact events carry
    # these fields, and every other event skips the index. Queries must repeat the
    # expressions and the WHERE term word for word for SQLite to use it.
    cur.execute(
        """
        CREATE INDEX events_fact_history
            ON events(json_extract(payload, '$.category'), json_extract(payload, '$.key'), seq)
            WHERE type IN ('fact.set', 'fact.deleted');
        """
    )


MIGRATIONS: list[Migration] = [
    Migration("0001_event_log", _event_log),
    Migration("0002_projections", _projections),
    Migration("0003_import_legacy_messages", _import_legacy),
    Migration("0004_macro_learning", _macro_learning),
    Migration("0005_consolidation", _consolidation),
    Migration("0006_embedding_backlog_index", _embedding_backlog),
    Migration("0007_fts", _fts),
    Migration("0008_fact_history_index", _fact_history_index),
]

PROJECTION_TABLES = (
    "messages", "facts", "macros", "scheduled_tasks", "terminal_allowed_prefixes",
    "macro_next_args", "macro_last_calls",
    "summary_sources",
)
"""Tables rebuilt from the log by ``memq rebuild``; everything else is log or bookkeeping.

``messages_fts`` (the lexical index) is emptied and refilled by a rebuild too, but it is
not compared row by row: a contentless index has no rows to read back. Its search results
are what a test compares."""


def _has_table(cur: apsw.Cursor, name: str) -> bool:
    row = cur.execute(
        "SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = ?", (name,)
    ).fetchone()
    return row is not None


def applied(conn: apsw.Connection) -> list[str]:
    """Names of the migrations already applied (read-only)."""
    if not _has_table(conn.cursor(), "schema_migrations"):
        return []
    return [r[0] for r in conn.execute("SELECT name FROM schema_migrations ORDER BY name")]


def pending(conn: apsw.Connection) -> list[Migration]:
    done = set(applied(conn))
    return [m for m in MIGRATIONS if m.name not in done]


def migrate(conn: apsw.Connection) -> list[str]:
    """Apply every pending migration, each in its own transaction; return their names."""
    conn.execute(
        "CREATE TABLE IF NOT EXISTS schema_migrations (name TEXT PRIMARY KEY, applied_at TEXT)"
    )
    names = []
    for migration in pending(conn):
        _apply_one(conn, migration)
        names.append(migration.name)
    return names


def _apply_one(conn: apsw.Connection, migration: Migration) -> None:
    cur = conn.cursor()
    cur.execute("BEGIN IMMEDIATE")
    try:
        migration.apply(cur)
        cur.execute(
            "INSERT INTO schema_migrations (name, applied_at) VALUES (?, ?)",
            (migration.name, now_rfc3339()),
        )
    except BaseException as exc:
        cur.execute("ROLLBACK")
        if isinstance(exc, apsw.Error):
            raise MigrationError(f"migration {migration.name} failed: {exc}") from exc
        raise
    cur.execute("COMMIT")
