"""Migrations of who may reach what: API keys."""

from __future__ import annotations

import apsw


def api_keys(cur: apsw.Cursor) -> None:
    # API keys (store/projections/keys.py): one row per key ever created, kept once revoked
    # so `memq keys list` and the audit can name it. The secret is never stored, only its
    # SHA-256 (a 256-bit random token needs no slow hash). `users` / `agents` are JSON
    # arrays, NULL for every user / agent.
    cur.execute(
        """
        CREATE TABLE api_keys (
            id            TEXT PRIMARY KEY,
            name          TEXT NOT NULL,
            secret_sha256 TEXT NOT NULL,
            users         TEXT,
            agents        TEXT,
            rights        TEXT NOT NULL,
            expires_at    TEXT,
            units_per_s   INTEGER,
            concurrent    INTEGER,
            created_at    TEXT NOT NULL,
            revoked_at    TEXT
        );
        -- Which key each event sent through memq serve came through (store/write/
        -- attribution.py): beside the log, not in it, so a rebuild keeps it and a forget,
        -- which erases payloads, leaves who did what and when (memq audit).
        CREATE TABLE event_keys (
            seq    INTEGER PRIMARY KEY,
            key_id TEXT NOT NULL
        );
        CREATE INDEX event_keys_by_key ON event_keys(key_id, seq);
        """
    )


def key_tenants(cur: apsw.Cursor) -> None:
    # A key reaches one tenant's ids (memq/tenants.py). The keys minted before tenants
    # were the default tenant's, the only one there was.
    cur.execute("ALTER TABLE api_keys ADD COLUMN tenant TEXT NOT NULL DEFAULT 'default'")


def feed_horizon(cur: apsw.Cursor) -> None:
    # The change feed (store/read/changes.py) is every event after a position, in order.
    # Retention deletes the events of old forgets: a consumer behind the last one it
    # deleted would miss them unawares. The highest position retention deleted is kept
    # here, beside the log (a rebuild in place keeps it), so such a consumer is told.
    cur.execute("CREATE TABLE feed_horizon (id INTEGER PRIMARY KEY CHECK (id = 1), "
                "seq INTEGER NOT NULL)")


def webhooks(cur: apsw.Cursor) -> None:
    # Webhooks the person registered (store/projections/webhooks.py). `after` is the
    # position of the event that added one: it is sent the changes committed after it.
    # The secret is kept (each delivery is signed with it); a removed webhook keeps its
    # row, for `memq webhooks list` and its deliveries.
    cur.execute("""
        CREATE TABLE webhooks (
            id         TEXT PRIMARY KEY,
            url        TEXT NOT NULL,
            types      TEXT NOT NULL,
            user_id    TEXT,
            secret     TEXT NOT NULL,
            after      INTEGER NOT NULL,
            created_at TEXT NOT NULL,
            removed_at TEXT
        )""")


def tenant_approvals(cur: apsw.Cursor) -> None:
    # An approval is one tenant's (store/projections/prefixes.py): the same prefix may be
    # allowed in one tenant and not another. Those before were the default tenant's.
    cur.execute("""
        CREATE TABLE terminal_allowed_prefixes_new (
            tenant     TEXT NOT NULL DEFAULT 'default',
            prefix     TEXT NOT NULL,
            created_at TEXT,
            PRIMARY KEY (tenant, prefix)
        );
        INSERT INTO terminal_allowed_prefixes_new (tenant, prefix, created_at)
            SELECT 'default', prefix, created_at FROM terminal_allowed_prefixes;
        DROP TABLE terminal_allowed_prefixes;
        ALTER TABLE terminal_allowed_prefixes_new RENAME TO terminal_allowed_prefixes;
    """)


def webhook_tenants(cur: apsw.Cursor) -> None:
    # A webhook may follow one tenant (store/dispatch/webhooks.py): its changes alone, in
    # its own names. NULL: every change, as stored (the webhooks made before).
    cur.execute("ALTER TABLE webhooks ADD COLUMN tenant TEXT")
