"""The migrations, in order: what each changes in the schema, and why.

:mod:`memq.store.schema` applies them (recorded; all pending ones in one transaction).
Append new migrations at the end of :data:`MIGRATIONS`; never edit one that has shipped.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import apsw

from memq.store.migrations import foundation as f
from memq.store.migrations import memory_model as m
from memq.store.migrations import principals as p
from memq.store.migrations.foundation import applied_names, has_table

__all__ = ["MIGRATIONS", "Migration", "applied_names", "has_table"]


@dataclass(frozen=True)
class Migration:
    name: str
    apply: Callable[[apsw.Cursor], None]
    last: bool = False
    """Runs after every other pending migration: it goes through the projections'
    appliers, which expect the schema the latest migrations give."""


MIGRATIONS: list[Migration] = [
    Migration("0001_event_log", f.event_log),
    Migration("0001b_legacy_tables_aside", f.legacy_tables_aside),
    Migration("0002_projections", f.projections),
    Migration("0003_import_legacy_messages", f.import_legacy, last=True),
    Migration("0004_macro_learning", f.macro_learning),
    Migration("0005_consolidation", f.consolidation),
    Migration("0006_embedding_backlog_index", f.embedding_backlog),
    Migration("0007_fts", f.fts),
    Migration("0008_fact_history_index", f.fact_history_index),
    Migration("0009_import_legacy_tables", f.import_legacy_tables, last=True),
    Migration("0010_session_marks", f.session_marks),
    Migration("0011_rejected_stream", f.rejected_stream),
    Migration("0011b_tombstones", f.tombstones),
    Migration("0011c_macro_ordinals", f.macro_ordinals),
    Migration("0011d_macro_owners", f.macro_owners),
    Migration("0012_macros_without_literals", f.macros_without_literals),
    Migration("0013_scopes", m.scopes),
    Migration("0014_facts_per_user", m.facts_per_user),
    Migration("0015_database_identity", m.database_identity),
    Migration("0016_forgetting", m.forgetting),
    Migration("0017_inbox_positions", m.inbox_positions),
    Migration("0018_documents", m.documents),
    Migration("0019_message_retention", m.message_retention),
    Migration("0020_events_erased_by", m.events_erased_by),
    Migration("0021_fts_external_content", m.fts_external_content),
    Migration("0022_message_forgetting", m.message_forgetting),
    Migration("0023_document_erasure", m.document_erasure),
    Migration("0024_macro_content_ids", m.macro_content_ids),
    Migration("0025_api_keys", p.api_keys),
    Migration("0026_key_tenants", p.key_tenants),
    Migration("0027_feed_horizon", p.feed_horizon),
    Migration("0028_fact_versions", m.fact_versions),
    Migration("0029_webhooks", p.webhooks),
    Migration("0030_tenant_approvals", p.tenant_approvals),
    Migration("0031_webhook_tenants", p.webhook_tenants),
    Migration("0032_erasing", m.erasing),
    Migration("0033_importance_by_user", m.importance_by_user),
    Migration("0034_lexical_merging", m.lexical_merging),
    Migration("0035_lexical_vocabulary", m.lexical_vocabulary),
    Migration("0036_lexical_inserts_plain", m.lexical_inserts_plain),
    Migration("0037_macros_per_user", m.macros_per_user),
]
