"""The first migrations: the event log, the projections, the legacy import, macro
learning, consolidation, the embedding backlog, the lexical index, session marks and
tombstones (0001-0012)."""

from __future__ import annotations

import apsw


def event_log(cur: apsw.Cursor) -> None:
    # A database in the legacy layout has a messages table and no event log: move it
    # aside so the import migration can turn every row into an event.
    if has_table(cur, "messages") and not has_table(cur, "events"):
        from memq.store.legacy import drop_triggers_and_views

        drop_triggers_and_views(cur)  # before anything else runs on a file memq did not make
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


def legacy_tables_aside(cur: apsw.Cursor) -> None:
    # The seed's database holds facts, macros, scheduled_tasks and terminal_allowed_prefixes
    # beside messages, and 0002 would collide with them: move them aside too, for
    # 0009_import_legacy_tables. Placed before 0002 although added later, because 0002
    # fails on such a database (it is also what a seed database upgraded by an older memq
    # was left with: 0001 applied, 0002 failed). A database that has 0002 has no legacy
    # tables to move, so there this does nothing.
    from memq.store.legacy import LEGACY_TABLES, drop_triggers_and_views, legacy_table

    if "0002_projections" in applied_names(cur):
        return
    drop_triggers_and_views(cur)  # memq made none before 0002: these came with the file
    for table in LEGACY_TABLES[1:]:
        if has_table(cur, table) and not has_table(cur, legacy_table(table)):
            cur.execute(f"ALTER TABLE {table} RENAME TO {legacy_table(table)}")


def projections(cur: apsw.Cursor) -> None:
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


def import_legacy(cur: apsw.Cursor) -> None:
    # Imported lazily: the legacy module needs the projection appliers.
    from memq.store.legacy import import_legacy_messages

    if has_table(cur, "legacy_messages"):
        import_legacy_messages(cur)


def import_legacy_tables(cur: apsw.Cursor) -> None:
    # After 0004: an imported macro fills memq's count columns too.
    from memq.store.legacy import import_legacy_tables

    import_legacy_tables(cur)


def macro_learning(cur: apsw.Cursor) -> None:
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


def consolidation(cur: apsw.Cursor) -> None:
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


def embedding_backlog(cur: apsw.Cursor) -> None:
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


def fts(cur: apsw.Cursor) -> None:
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


def fact_history_index(cur: apsw.Cursor) -> None:
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


def session_marks(cur: apsw.Cursor) -> None:
    # Per session, the position of the last event that changed its messages (see
    # store/projections/sessions.py): readers in other processes compare it with the one
    # their copy was read at. The types are those of CHANGES_MESSAGES when this shipped.
    cur.execute(
        """
        CREATE TABLE sessions (
            session_id  TEXT PRIMARY KEY,
            changed_seq INTEGER NOT NULL
        ) WITHOUT ROWID;
        INSERT INTO sessions (session_id, changed_seq)
            SELECT session_id, max(seq) FROM events
            WHERE session_id IS NOT NULL AND type IN ('message.appended', 'message.imported',
                'session.consolidated', 'session.forgotten')
            GROUP BY session_id;
        """
    )


def rejected_stream(cur: apsw.Cursor) -> None:
    # Which inbox stream a rejected entry came from, i.e. which role sent it: a replay goes
    # back to that stream, so it is judged with its sender's rights and never gains the
    # operator's. Entries set aside before the streams existed count as the agents'.
    cur.execute(
        "ALTER TABLE rejected_events ADD COLUMN stream TEXT NOT NULL DEFAULT 'memq:inbox'"
    )


def macros_without_literals(cur: apsw.Cursor) -> None:
    # Templates kept literal argument values (credentials among them) and suggested them
    # to every session; under the new rule they keep shapes and references only. The
    # macro tables are relearned from the log, so they match a rebuild and old values go.
    from memq.store.projections.macros import relearn

    relearn(cur)


def macro_ordinals(cur: apsw.Cursor) -> None:
    # Learned macros get ids of their own (0024); the place in which each was learned,
    # what ids were until then, is kept for the uses that name a macro by it. Placed
    # before 0012 although added later, because 0012 replays the log through today's
    # appliers, which write this column.
    cur.execute("ALTER TABLE macros ADD COLUMN ordinal INTEGER")
    cur.execute("UPDATE macros SET ordinal = id")
    cur.execute("CREATE UNIQUE INDEX macros_by_ordinal ON macros(ordinal)")


def macro_owners(cur: apsw.Cursor) -> None:
    # Macros are learned per user too (store/projections/macros.py): a row's `owner` is the
    # stored user id whose sessions taught it, NULL for the tenant-wide aggregate, so a
    # transition is one row per owner. Placed before 0012 although added later, because
    # 0012 and 0024 replay the log through today's appliers, which write this column; the
    # per-user rows are learned by 0037.
    cur.execute(
        """
        ALTER TABLE macros ADD COLUMN owner TEXT;
        DROP INDEX macros_by_transition;
        CREATE UNIQUE INDEX macros_by_transition
            ON macros(trigger_tool, trigger_args_pattern, ifnull(owner, ''), next_tool);
        """
    )


def tombstones(cur: apsw.Cursor) -> None:
    # A forgotten event stays in the log as a tombstone: `erased_by` names the event that
    # erased it, and its payload is emptied (store/projections/forgetting.py). Placed before
    # 0012 although added later, because 0012 replays the log, and a replay skips
    # tombstones by this column.
    cur.execute("ALTER TABLE events ADD COLUMN erased_by INTEGER")


def has_table(cur: apsw.Cursor, name: str) -> bool:
    row = cur.execute(
        "SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = ?", (name,)
    ).fetchone()
    return row is not None


def applied_names(cur: apsw.Cursor) -> set[str]:
    return {str(r[0]) for r in cur.execute("SELECT name FROM schema_migrations")}
