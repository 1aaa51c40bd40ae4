"""LangGraph: :class:`MemqStore`, a ``BaseStore`` whose items are memq documents.

A namespace is a path of labels within the store's scope: the store made with
``user_id=`` holds that user's documents (forgetting the user erases them, and no other
user's store sees them), the one made without holds the global ones. ``put`` embeds the
indexed fields' text with memq's model (the whole value by default; ``index=False`` skips
it, a list of paths picks fields), so ``search(query=...)`` ranks by meaning; ``filter``
matches values as LangGraph's own stores do; ``ttl`` (minutes) expires an item after its
last put, or its last read when reads refresh. A batch reads first and writes last, as
LangGraph's in-memory store does, and returns once its writes are committed.
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterable
from datetime import datetime
from typing import TYPE_CHECKING, Any

from langgraph.store.base import (
    BaseStore,
    GetOp,
    Item,
    ListNamespacesOp,
    Op,
    PutOp,
    Result,
    SearchItem,
    SearchOp,
    TTLConfig,
)
from langgraph.store.base.embed import get_text_at_path

from memq.integrations._client import DocumentClient, default_client

if TYPE_CHECKING:
    from memq import Document

__all__ = ["MemqStore"]


class MemqStore(BaseStore):
    """LangGraph's store on memq; ``index_fields``: the paths whose text a put embeds
    (default ``["$"]``, the whole value; ``[]``: none); ``ttl``: LangGraph's TTL settings
    (reads refresh a time to live unless ``refresh_on_read`` is False)."""

    supports_ttl = True

    def __init__(self, *, client: DocumentClient | None = None, user_id: str | None = None,
                 index_fields: list[str] | None = None, ttl: TTLConfig | None = None) -> None:
        self.client: DocumentClient = default_client() if client is None else client
        self.user_id = user_id
        self.index_fields = ["$"] if index_fields is None else index_fields
        self.ttl_config = ttl if ttl is not None else TTLConfig(refresh_on_read=True)

    def batch(self, ops: Iterable[Op]) -> list[Result]:
        ops = list(ops)
        results: list[Result] = [None] * len(ops)
        puts: dict[tuple[tuple[str, ...], str], PutOp] = {}
        for i, op in enumerate(ops):
            if isinstance(op, PutOp):
                puts[(op.namespace, op.key)] = op  # the last put of a key wins
            else:
                results[i] = self._read(op)
        for op in puts.values():
            self._write(op)
        if puts:
            self.client.flush()
        return results

    async def abatch(self, ops: Iterable[Op]) -> list[Result]:
        return await asyncio.to_thread(self.batch, list(ops))

    def _read(self, op: Op) -> Result:
        if isinstance(op, GetOp):
            found = self.client.document(op.namespace, op.key, user_id=self.user_id)
            self._refresh([found] if op.refresh_ttl and found is not None else [])
            return None if found is None else Item(**_fields(found))
        if isinstance(op, SearchOp):
            hits = self.client.search_documents(  # LangGraph: an empty query is none
                op.namespace_prefix, query=op.query or None, filter=op.filter,
                limit=op.limit, offset=op.offset, user_id=self.user_id)
            self._refresh([h.document for h in hits] if op.refresh_ttl else [])
            return [_item(h.document, h.score) for h in hits]
        if isinstance(op, ListNamespacesOp):
            return _namespaces(self.client.document_namespaces(user_id=self.user_id), op)
        raise TypeError(f"unknown store operation: {type(op).__name__}")

    def _write(self, op: PutOp) -> None:
        if op.value is None:
            self.client.delete_document(op.namespace, op.key, user_id=self.user_id)
            return
        fields = self.index_fields if op.index is None else op.index or []
        texts = [t for path in fields for t in get_text_at_path(op.value, path)]
        self.client.put_document(op.namespace, op.key, dict(op.value),
                                 text="\n".join(texts) if texts else None,
                                 ttl_minutes=op.ttl, user_id=self.user_id)

    def _refresh(self, documents: list[Document]) -> None:
        for document in documents:
            if document.expires_at is not None:
                self.client.touch_document(document.namespace, document.key,
                                           user_id=self.user_id)


def _item(document: Document, score: float | None = None) -> SearchItem:
    return SearchItem(**_fields(document), score=score)


def _fields(document: Document) -> dict[str, Any]:
    return {"namespace": document.namespace, "key": document.key, "value": document.value,
            "created_at": datetime.fromisoformat(document.created_at),
            "updated_at": datetime.fromisoformat(document.updated_at)}


def _namespaces(every: list[tuple[str, ...]], op: ListNamespacesOp) -> list[tuple[str, ...]]:
    """LangGraph's namespace listing: prefix/suffix conditions ('*' matches any label),
    cut to ``max_depth`` labels, deduplicated, then the page."""
    kept = [ns for ns in every if all(_holds(ns, c.match_type, tuple(c.path))
                                     for c in op.match_conditions or ())]
    if op.max_depth is not None:
        kept = sorted({ns[:op.max_depth] for ns in kept})
    return kept[op.offset:op.offset + op.limit]


def _holds(namespace: tuple[str, ...], match_type: str, path: tuple[str, ...]) -> bool:
    if len(path) > len(namespace):
        return False
    part = namespace[:len(path)] if match_type == "prefix" else namespace[-len(path):]
    return all(p in ("*", label) for p, label in zip(path, part, strict=True))
