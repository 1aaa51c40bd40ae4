"""The migrations of the memory model: scopes (users and agents), per-user facts, the
database identity, forgetting, inbox positions, documents, retention, and the lexical
index read back from messages (0013 on)."""

from __future__ import annotations

import uuid

import apsw

from memq.clock import now_rfc3339


def scopes(cur: apsw.Cursor) -> None:
    # Who a session belongs to (store/projections/sessions.py). A message carries its
    # session's user and agent too, so a search over every session of a user (or of one
    # of its agents) seeks one index instead of joining; the owner of a session never
    # changes, so the copies cannot disagree. `sessions` (0010) also counts messages
    # (summaries excluded) and keeps the span of their times, for listing; a row without
    # messages (a forgotten session keeps its mark) has no times. The lexical index gains
    # a user and an agent token per message, built like the session token, so a search
    # stays inside its scope within FTS5. `events_by_session` finds a session's events
    # when it is forgotten.
    cur.execute(
        f"""
        ALTER TABLE messages ADD COLUMN user_id TEXT;
        ALTER TABLE messages ADD COLUMN agent_id TEXT;
        CREATE INDEX messages_by_user ON messages(user_id, created_at, seq)
            WHERE user_id IS NOT NULL;
        CREATE INDEX messages_by_agent ON messages(user_id, agent_id, created_at, seq)
            WHERE agent_id IS NOT NULL;

        ALTER TABLE sessions ADD COLUMN user_id TEXT;
        ALTER TABLE sessions ADD COLUMN agent_id TEXT;
        ALTER TABLE sessions ADD COLUMN started_at TEXT;
        ALTER TABLE sessions ADD COLUMN last_active_at TEXT;
        ALTER TABLE sessions ADD COLUMN message_count INTEGER NOT NULL DEFAULT 0;
        CREATE INDEX sessions_by_activity ON sessions(last_active_at, session_id)
            WHERE last_active_at IS NOT NULL;
        CREATE INDEX sessions_by_user ON sessions(user_id, last_active_at, session_id)
            WHERE user_id IS NOT NULL;
        CREATE INDEX sessions_by_agent ON sessions(agent_id, last_active_at, session_id)
            WHERE agent_id IS NOT NULL;
        UPDATE sessions SET (started_at, last_active_at, message_count) = (
            SELECT min(created_at), max(created_at), count(*) - count(ss.summary_id)
            FROM messages LEFT JOIN (SELECT DISTINCT summary_id FROM summary_sources) AS ss
                ON ss.summary_id = messages.id
            WHERE messages.session_id = sessions.session_id);

        CREATE INDEX events_by_session ON events(session_id, seq)
            WHERE session_id IS NOT NULL;

        DROP TABLE messages_fts;
        CREATE VIRTUAL TABLE messages_fts USING fts5(
            content, session, user, agent,
            content = '', contentless_delete = 1,
            tokenize = 'porter unicode61 remove_diacritics 2'
        );
        INSERT INTO messages_fts (rowid, content, session)
            SELECT seq, content, {token_sql("s", "session_id")} FROM messages;
        """
    )


def token_sql(prefix: str, column: str) -> str:
    """SQL for the lexical index's token of an id (as store.lexical.scope_token)."""
    return f"'{prefix}' || hex({column}) || 'x'"


def facts_per_user(cur: apsw.Cursor) -> None:
    # A fact belongs to a user, or to nobody (a global fact, user_id NULL): one value per
    # (user, category, key). The table is rebuilt to drop UNIQUE (category, key); ids
    # are kept. The fact history index seeks a user's fact events too (forgetting a user
    # finds them there); queries repeat its expressions and WHERE term word for word.
    cur.execute(
        """
        CREATE TABLE facts_by_user (
            id         INTEGER PRIMARY KEY,
            category   TEXT NOT NULL,
            key        TEXT NOT NULL,
            value      TEXT NOT NULL,
            source     TEXT NOT NULL CHECK (source IN ('agent','user')),
            created_at TEXT NOT NULL,
            updated_at TEXT NOT NULL,
            user_id    TEXT
        );
        INSERT INTO facts_by_user (id, category, key, value, source, created_at, updated_at)
            SELECT id, category, key, value, source, created_at, updated_at FROM facts;
        DROP TABLE facts;
        ALTER TABLE facts_by_user RENAME TO facts;
        CREATE UNIQUE INDEX facts_by_key ON facts(ifnull(user_id, ''), category, key);

        DROP INDEX events_fact_history;
        CREATE INDEX events_fact_history
            ON events(json_extract(payload, '$.user_id'), json_extract(payload, '$.category'),
                      json_extract(payload, '$.key'), seq)
            WHERE type IN ('fact.set', 'fact.deleted');
        """
    )


def database_identity(cur: apsw.Cursor) -> None:
    # A random id made once, when the database is created (or first upgraded): the writer
    # binds a Redis keyspace to it, so that two databases never share one inbox and a
    # client reading another database than the writer's is told so (memq/identity.py).
    # A copy of the file (a backup, a restore) keeps the id: it is the same database.
    cur.execute(
        """
        CREATE TABLE database_identity (
            id         TEXT PRIMARY KEY,
            created_at TEXT NOT NULL
        );
        """
    )
    cur.execute("INSERT INTO database_identity (id, created_at) VALUES (?, ?)",
                (uuid.uuid4().hex, now_rfc3339()))


def forgetting(cur: apsw.Cursor) -> None:
    # Forgetting (store/projections/forgetting.py; tombstones: 0011b). A fact's id is now
    # the position of the event that created it, so that ids do not shift when other
    # facts are forgotten (store/projections/facts.py): the facts are relearned (with
    # their versions, which the relearning keeps since 0028: made here for it).
    from memq.store.projections.facts import relearn

    create_fact_versions(cur)
    relearn(cur)
    # `events_by_message` finds the embedding results of a message (they name no session).
    # `erasures` records each forget, read by other processes to drop what they cached;
    # `erased_messages` keeps the ids (never the text) of forgotten messages, so a late
    # result for one is tombstoned on arrival. Both are bookkeeping: a rebuild keeps them.
    cur.execute(
        """
        CREATE INDEX events_by_message ON events(json_extract(payload, '$.message_id'))
            WHERE type IN ('message.embedded', 'message.embedding_failed');

        CREATE TABLE erasures (
            seq        INTEGER PRIMARY KEY,
            event_id   TEXT NOT NULL,
            kind       TEXT NOT NULL CHECK (kind IN ('session', 'user')),
            session_id TEXT,
            user_id    TEXT,
            created_at TEXT NOT NULL,
            messages   INTEGER NOT NULL,
            events     INTEGER NOT NULL
        );
        CREATE TABLE erased_messages (
            message_id TEXT PRIMARY KEY,
            erased_by  INTEGER NOT NULL
        ) WITHOUT ROWID;
        """
    )


def inbox_positions(cur: apsw.Cursor) -> None:
    # The last inbox entry applied, per stream, moved in the transaction that applies it
    # (store/write/positions.py): a restored copy says where it stands in the inbox.
    cur.execute(
        """
        CREATE TABLE inbox_positions (
            stream TEXT PRIMARY KEY,
            ms     INTEGER NOT NULL,
            seq    INTEGER NOT NULL
        ) WITHOUT ROWID;
        """
    )


def documents(cur: apsw.Cursor) -> None:
    # Documents (store/projections/documents.py): JSON values under a namespace path and a
    # key, one per (user, namespace, key); `namespace` is the path as a JSON array, so a
    # prefix of the path is a prefix of the text. `expires_at` is NULL without a time to
    # live. `events_document_owner` finds a user's document events when the user is
    # forgotten (the expression and WHERE terms of its query, word for word).
    cur.execute(
        """
        CREATE TABLE documents (
            namespace       TEXT NOT NULL,
            key             TEXT NOT NULL,
            user_id         TEXT,
            value           TEXT NOT NULL,
            created_at      TEXT NOT NULL,
            updated_at      TEXT NOT NULL,
            ttl_minutes     REAL,
            expires_at      TEXT,
            embedding       BLOB,
            embedding_model TEXT,
            seq             INTEGER NOT NULL
        );
        CREATE UNIQUE INDEX documents_by_key ON documents(ifnull(user_id, ''), namespace, key);
        CREATE INDEX documents_by_expiry ON documents(expires_at) WHERE expires_at IS NOT NULL;
        CREATE INDEX events_document_owner ON events(json_extract(payload, '$.user_id'))
            WHERE type IN ('document.put', 'document.deleted', 'document.touched');
        """
    )


def message_retention(cur: apsw.Cursor) -> None:
    # Messages past `[retention] messages_days` are erased by `retention.applied`
    # (store/projections/retention.py), their summaries kept. `erased_messages` then keeps
    # what a rebuild needs to replay a summary of them (never their text): where and when
    # each was, and whose; a forgotten message leaves these NULL. A retention is recorded
    # in `erasures` like a forget, so other processes drop what they cached.
    cur.execute(
        """
        ALTER TABLE erased_messages ADD COLUMN session_id TEXT;
        ALTER TABLE erased_messages ADD COLUMN created_at TEXT;
        ALTER TABLE erased_messages ADD COLUMN user_id TEXT;
        ALTER TABLE erased_messages ADD COLUMN agent_id TEXT;
        CREATE TABLE erasures_new (
            seq        INTEGER PRIMARY KEY,
            event_id   TEXT NOT NULL,
            kind       TEXT NOT NULL CHECK (kind IN ('session', 'user', 'retention')),
            session_id TEXT,
            user_id    TEXT,
            created_at TEXT NOT NULL,
            messages   INTEGER NOT NULL,
            events     INTEGER NOT NULL
        );
        INSERT INTO erasures_new SELECT * FROM erasures;
        DROP TABLE erasures;
        ALTER TABLE erasures_new RENAME TO erasures;
        """
    )


def events_erased_by(cur: apsw.Cursor) -> None:
    # The retention pass deletes the tombstones of old forgets by `erased_by`
    # (store/projections/retention.py): without an index that is a scan of the whole log.
    cur.execute("CREATE INDEX events_erased_by ON events(erased_by) WHERE erased_by IS NOT NULL")


def fts_external_content(cur: apsw.Cursor) -> None:
    # The lexical index was contentless: FTS5 can only drop a contentless row's words by
    # merging the segments that hold them, so every forget rewrote the whole index (~0.1 s
    # per 30,000 messages, however few were forgotten). Reading the text back from
    # messages (the view makes the scope tokens as store.lexical does), FTS5 deletes a
    # row's words in place ('secure-delete'). Refilled from messages by 'rebuild'.
    cur.execute(
        f"""
        DROP TABLE messages_fts;
        CREATE VIEW messages_fts_source AS
            SELECT seq, content, {token_sql("s", "session_id")} AS session,
                CASE WHEN user_id IS NOT NULL THEN {token_sql("u", "user_id")} END AS user,
                CASE WHEN agent_id IS NOT NULL THEN {token_sql("a", "agent_id")} END AS agent
            FROM messages;
        CREATE VIRTUAL TABLE messages_fts USING fts5(
            content, session, user, agent,
            content = 'messages_fts_source', content_rowid = 'seq',
            tokenize = 'porter unicode61 remove_diacritics 2'
        );
        INSERT INTO messages_fts (messages_fts) VALUES ('rebuild');
        INSERT INTO messages_fts (messages_fts, rank) VALUES ('secure-delete', 1);
        """
    )


def message_forgetting(cur: apsw.Cursor) -> None:
    # `message.forgotten` erases one message (store/projections/forgetting.py), recorded
    # in `erasures` as kind 'message'. Its `erased_messages` row also keeps the message's
    # position (`seq`) beside its session and owner: a rebuild, which no longer sees the
    # message, gives the turns that followed it the owner it had fixed for the session
    # (store/projections/sessions.py). The index answers that lookup by seeking.
    cur.execute(
        """
        CREATE TABLE erasures_new (
            seq        INTEGER PRIMARY KEY,
            event_id   TEXT NOT NULL,
            kind       TEXT NOT NULL
                       CHECK (kind IN ('session', 'user', 'retention', 'message')),
            session_id TEXT,
            user_id    TEXT,
            created_at TEXT NOT NULL,
            messages   INTEGER NOT NULL,
            events     INTEGER NOT NULL
        );
        INSERT INTO erasures_new SELECT * FROM erasures;
        DROP TABLE erasures;
        ALTER TABLE erasures_new RENAME TO erasures;
        ALTER TABLE erased_messages ADD COLUMN seq INTEGER;
        CREATE INDEX erased_messages_by_session ON erased_messages(session_id, seq)
            WHERE seq IS NOT NULL;
        """
    )


def document_erasure(cur: apsw.Cursor) -> None:
    # A deleted or expired document's events become tombstones (their payloads hold its
    # values and vector; store/projections/documents.py). `events_document_key` finds a
    # document's events by its user, namespace and key, and by the user alone for a
    # forget: it replaces `events_document_owner` (the same expression first, the same
    # WHERE terms). Documents deleted before this migration lose theirs now, as they
    # would have then; those that expired keep theirs (their expiry is not in the log).
    cur.execute(
        """
        CREATE INDEX events_document_key ON events(json_extract(payload, '$.user_id'),
            json_extract(payload, '$.namespace'), json_extract(payload, '$.key'))
            WHERE type IN ('document.put', 'document.deleted', 'document.touched');
        DROP INDEX events_document_owner;
        WITH doomed AS MATERIALIZED (
            SELECT e.seq, (
                SELECT min(d.seq) FROM events AS d
                WHERE d.type = 'document.deleted' AND d.seq > e.seq
                  AND json_extract(d.payload, '$.user_id') IS json_extract(e.payload, '$.user_id')
                  AND json_extract(d.payload, '$.namespace')
                      = json_extract(e.payload, '$.namespace')
                  AND json_extract(d.payload, '$.key') = json_extract(e.payload, '$.key')
            ) AS deleted_by
            FROM events AS e
            WHERE e.type IN ('document.put', 'document.deleted', 'document.touched')
              AND e.erased_by IS NULL)
        UPDATE events SET payload = '{}',
            erased_by = (SELECT deleted_by FROM doomed WHERE doomed.seq = events.seq)
        WHERE seq IN (SELECT seq FROM doomed WHERE deleted_by IS NOT NULL);
        """
    )


def macro_content_ids(cur: apsw.Cursor) -> None:
    # A learned macro's id was its place in the order macros were learned, so forgetting
    # one user's calls renumbered every later macro: another user's recorded uses then
    # named no macro (and were tombstoned) or the wrong one, and the ids agents held
    # changed. Ids are now hashes of the transitions (store/projections/macros.py); the
    # projection is relearned under that rule, and each use logged before (version 1,
    # naming its macro by place, which `ordinal` keeps) is rewritten to name its macro's
    # id. What is left in version 1 is tombstones, whose payload is gone.
    from memq.store.projections.macros import relearn

    relearn(cur)
    cur.execute("UPDATE events SET version = 2 WHERE type = 'macro.used' AND version = 1")


def macros_per_user(cur: apsw.Cursor) -> None:
    # Learned macros were only the tenant-wide aggregate, which showed the bare words of
    # one user's calls to a key limited to another. Each transition in a session that has
    # a user is now also counted in rows of that user (the column, 0011d); the aggregate
    # keeps its ids and counts. Relearned from the log, as a rebuild would learn them.
    # Forgetting a user also erases their calls in sessions emptied since, found by the
    # owners erased_messages keeps (store/projections/forgetting.py).
    from memq.store.projections.macros import relearn

    cur.execute("CREATE INDEX IF NOT EXISTS erased_messages_by_user "
                "ON erased_messages(user_id, session_id) "
                "WHERE user_id IS NOT NULL")
    relearn(cur)


def fact_versions(cur: apsw.Cursor) -> None:
    # A fact's values over time, filled from the log as a rebuild fills it.
    from memq.store.projections import facts

    create_fact_versions(cur)
    facts.relearn(cur)


def create_fact_versions(cur: apsw.Cursor) -> None:
    # A fact's values over time (store/projections/fact_versions.py): each value a
    # fact.set applied, with two clocks. valid_from / valid_to: when it was true in the
    # world (the event says, or it is when it was sent); recorded_at / ended_at: when memq
    # learned it began and ended. A new value ends the old one's validity instead of
    # erasing it. IF NOT EXISTS: migration 0014 makes it first on a database that old.
    cur.execute("""
        CREATE TABLE IF NOT EXISTS fact_versions (
            seq         INTEGER PRIMARY KEY,
            user_id     TEXT,
            category    TEXT NOT NULL,
            key         TEXT NOT NULL,
            value       TEXT NOT NULL,
            source      TEXT NOT NULL,
            valid_from  TEXT NOT NULL,
            valid_to    TEXT,
            recorded_at TEXT NOT NULL,
            ended_at    TEXT
        );
        CREATE INDEX IF NOT EXISTS fact_versions_by_key
            ON fact_versions(ifnull(user_id, ''), category, key, valid_from);
    """)


def erasing(cur: apsw.Cursor) -> None:
    # A big forget hides its sessions' messages at once and erases them in bounded steps
    # (store/projections/erasure_steps.py): one row per session and forget, until done.
    cur.execute("""
        CREATE TABLE erasing (
            session_id TEXT NOT NULL,
            by_seq     INTEGER NOT NULL,
            PRIMARY KEY (session_id, by_seq)
        ) WITHOUT ROWID""")


def importance_by_user(cur: apsw.Cursor) -> None:
    # The important turns of a user (or of a user's agent) were found by reading every
    # row of the user, importance being in none of the user's indexes: 65 ms a call at
    # 100,000 turns (bench/context.py --realistic), where the session scope had
    # messages_by_importance. Important turns are few, so the index finds them and the
    # agent's are filtered among those.
    cur.execute("""
        CREATE INDEX messages_by_user_importance ON messages(user_id, importance)
            WHERE user_id IS NOT NULL""")


def lexical_merging(cur: apsw.Cursor) -> None:
    # The writer merges the lexical index's segments while idle (store/lexical.py's tidy),
    # a level as soon as it holds two (FTS5's 'usermerge'; 4 by default): a forget's
    # deletes cost ~3x more over the ten segments 20,000 turns left than over two.
    cur.execute("INSERT INTO messages_fts (messages_fts, rank) VALUES ('usermerge', 2)")


def lexical_vocabulary(cur: apsw.Cursor) -> None:
    # How many turns hold each token, read from the index itself (no copy: a forget's
    # deletes reach it with the index): a search leaves out a query's words that most
    # turns hold while rarer ones remain (store/read/lexical.py's rare_terms).
    cur.execute("CREATE VIRTUAL TABLE messages_fts_vocab USING fts5vocab(messages_fts, row)")


def lexical_inserts_plain(cur: apsw.Cursor) -> None:
    # FTS5's 'secure-delete' also slows every insert: while it flushes a word whose doclist
    # spans leaves, it reads the first byte of each turn's position list as a delete flag,
    # and for a long list (a word repeated through a tool output) that byte is a varint's
    # high part, so it seeks the word's earlier segments for a delete that is not there
    # (~2.8x the cost of indexing 32 turns of tool output). store/lexical.py's unindex
    # turns it on around the deletes that need it, inside the same transaction.
    cur.execute("INSERT INTO messages_fts (messages_fts, rank) VALUES ('secure-delete', 0)")
