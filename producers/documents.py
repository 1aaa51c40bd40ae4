"""Documents: JSON values kept under a namespace path and a key, the key-value store that
agent frameworks expect (LangGraph's ``BaseStore`` maps onto it), searchable by meaning.

A document is one user's (``user_id``) or global, as facts are: each read sees one of the
two, and forgetting the user erases theirs. ``ttl_minutes`` makes a document expire that
long after it was last put or touched. ``put_document(..., text=...)`` embeds ``text``
with memq's model in this process and sends the vector with the document, so that
``search_documents(query=...)`` ranks by cosine similarity; the writer stores both.
Writes return at once (``flush`` waits for them); reads show what is committed.
"""

from __future__ import annotations

import base64
import logging
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np

from memq.clock import now_rfc3339
from memq.errors import ValidationError
from memq.events import EventType, check_count, check_identifier, check_query
from memq.events.rules import namespace as problem_of
from memq.events.vocabulary import MAX_TTL_MINUTES
from memq.logs import log
from memq.printable import shown
from memq.producers.mixin import ClientBase
from memq.producers.ops import Op, Read, Run
from memq.store.read import documents as stored
from memq.store.read.documents import Document
from memq.store.read.pool import Reader

if TYPE_CHECKING:
    from memq.producers.context import QueryVectors

logger = logging.getLogger("memq.documents")


MAX_DOCUMENTS_PAGE = 10_000
"""Most documents one search returns."""

_OPERATORS = ("$eq", "$ne", "$gt", "$gte", "$lt", "$lte")


@dataclass(frozen=True)
class FoundDocument:
    """A document a search found; ``score`` is its cosine similarity to the query (None
    without a query, or for a document put without text)."""

    document: Document
    score: float | None = None


class DocumentsOps(ClientBase):
    """The documents operations (``producers/ops.py``) both clients run."""

    if TYPE_CHECKING:
        query_vectors: QueryVectors

    def _put_document_op(
        self, namespace: tuple[str, ...] | list[str], key: str, value: dict[str, Any], *,
        text: str | None, ttl_minutes: float | None, user_id: str | None,
    ) -> Op[str]:
        payload = self._document_names(namespace, key, user_id)
        if not isinstance(value, dict):
            raise ValidationError(f"value must be a dict, got {type(value).__name__}")
        payload["value"] = value
        if ttl_minutes is not None:
            if (isinstance(ttl_minutes, bool) or not isinstance(ttl_minutes, int | float)
                    or not 0 <= ttl_minutes <= MAX_TTL_MINUTES):
                raise ValidationError(f"ttl_minutes must be a number from 0 to "
                                      f"{MAX_TTL_MINUTES:g}, got {shown(ttl_minutes):.40}")
            payload["ttl_minutes"] = float(ttl_minutes)
        if text is not None:
            if not isinstance(text, str):
                raise ValidationError(f"text must be a string, got {type(text).__name__}")
            payload.update((yield Run(self._vector_fields, (text,))))  # the model: CPU-bound
        return (yield from self._send_op(EventType.DOCUMENT_PUT, payload))

    def _delete_document_op(self, namespace: tuple[str, ...] | list[str], key: str,
                            user_id: str | None) -> Op[str]:
        return self._send_op(EventType.DOCUMENT_DELETED,
                             self._document_names(namespace, key, user_id))

    def _touch_document_op(self, namespace: tuple[str, ...] | list[str], key: str,
                           user_id: str | None) -> Op[str]:
        return self._send_op(EventType.DOCUMENT_TOUCHED,
                             self._document_names(namespace, key, user_id))

    def _document_op(self, namespace: tuple[str, ...] | list[str], key: str,
                     user_id: str | None) -> Op[Document | None]:
        names = self._document_names(namespace, key, user_id)
        found: Document | None = yield Read(_get_document, (tuple(names["namespace"]), key,
                                                            user_id))
        return found

    def _search_documents_op(
        self, prefix: tuple[str, ...] | list[str], query: str | None,
        filter: dict[str, Any] | None, limit: int, offset: int, user_id: str | None,
    ) -> Op[list[FoundDocument]]:
        _check_page(limit, offset)
        query = check_query(query, self.config.limits.max_content_bytes)
        if filter is not None:
            _check_filter(filter)
        labels = tuple(_labels(prefix, allow_empty=True))
        if user_id is not None:
            check_identifier("user_id", user_id)
        if filter is None and query is None:  # the page alone is read
            page: list[Document] = yield Read(_documents_under, (labels, user_id, limit,
                                                                 offset))
            return [FoundDocument(d) for d in page]
        if filter is None and query is not None:
            return (yield from self._ranked_page_op(labels, user_id, query, limit, offset))
        found: list[Document] = yield Read(_documents_under, (labels, user_id))
        kept = [d for d in found if matches(d.value, filter)]
        if query is None:
            return [FoundDocument(d) for d in kept][offset:offset + limit]
        hits: list[FoundDocument] = yield Run(self._ranked, (kept, query))
        return hits[offset:offset + limit]

    def _ranked_page_op(self, labels: tuple[str, ...], user_id: str | None, query: str,
                        limit: int, offset: int) -> Op[list[FoundDocument]]:
        """Ranked by vector alone: every document under the prefix read without its
        value, then the page's read whole."""
        ranked: list[Document] = yield Read(_documents_under, (labels, user_id, -1, 0, False))
        hits: list[FoundDocument] = yield Run(self._ranked, (ranked, query))
        page: list[FoundDocument] = yield Read(_with_values, (hits[offset:offset + limit],
                                                              user_id))
        return page

    def _document_namespaces_op(self, user_id: str | None) -> Op[list[tuple[str, ...]]]:
        if user_id is not None:
            check_identifier("user_id", user_id)
        found: list[tuple[str, ...]] = yield Read(_namespaces, (user_id,))
        return found

    def _ranked(self, documents: list[Document], query: str) -> list[FoundDocument]:
        model, size = self.config.embed.model_name, self.config.embed.dim * 4
        scored = [d for d in documents if d.embedding is not None and d.embedding_model == model
                  and len(d.embedding) == size]
        rest = [FoundDocument(d) for d in documents if d not in scored]
        unfit = [d for d in documents if d.embedding_model == model and d not in scored]
        if unfit:
            # Stored before the writer checked dimensions: ranked last, never an error.
            log(logger, "documents with a vector of the wrong size are ranked last",
                logging.WARNING, count=len(unfit), model=model)
        if not scored:
            return rest
        matrix = np.stack([np.frombuffer(d.embedding or b"", dtype="<f4") for d in scored])
        scores = matrix @ self.query_vectors(query)
        order = np.argsort(-scores, kind="stable")
        return [FoundDocument(scored[i], float(scores[i])) for i in order] + rest

    def _vector_fields(self, text: str) -> dict[str, Any]:
        vector = np.asarray(self.query_vectors.embedder.embed([text])[0], dtype="<f4")
        return {"model": self.config.embed.model_name, "dim": int(vector.shape[0]),
                "vector_b64": base64.b64encode(vector.tobytes()).decode("ascii")}

    def _document_names(self, namespace: Any, key: Any, user_id: Any) -> dict[str, Any]:
        names: dict[str, Any] = {"namespace": _labels(namespace),
                                 "key": check_identifier("key", key)}
        if user_id is not None:
            names["user_id"] = check_identifier("user_id", user_id)
        return names


def _get_document(conn: Reader, namespace: tuple[str, ...], key: str, user_id: str | None
                  ) -> Document | None:
    return stored.get_document(conn, namespace, key, user_id=user_id, now=now_rfc3339())


def _documents_under(conn: Reader, labels: tuple[str, ...], user_id: str | None,
                     limit: int = -1, offset: int = 0, values: bool = True) -> list[Document]:
    return stored.documents_under(conn, labels, user_id=user_id, now=now_rfc3339(),
                                  limit=limit, offset=offset, values=values)


def _with_values(conn: Reader, hits: list[FoundDocument], user_id: str | None
                 ) -> list[FoundDocument]:
    """``hits`` with their documents read whole (one deleted meanwhile is left out)."""
    now = now_rfc3339()
    found = [(hit, stored.get_document(conn, hit.document.namespace, hit.document.key,
                                       user_id=user_id, now=now)) for hit in hits]
    return [FoundDocument(document, hit.score) for hit, document in found
            if document is not None]


def _namespaces(conn: Reader, user_id: str | None) -> list[tuple[str, ...]]:
    return stored.namespaces(conn, user_id=user_id, now=now_rfc3339())


def _labels(namespace: Any, *, allow_empty: bool = False) -> list[str]:
    if not isinstance(namespace, tuple | list):
        raise ValidationError(f"namespace must be a tuple of labels, got "
                              f"{type(namespace).__name__}")
    if not namespace and allow_empty:
        return []
    labels = list(namespace)
    problem = problem_of(labels)
    if problem is not None:
        raise ValidationError(f"namespace {problem}")
    return labels


def _check_page(limit: Any, offset: Any) -> None:
    check_count("limit", limit, 1, MAX_DOCUMENTS_PAGE)
    check_count("offset", offset, 0, MAX_DOCUMENTS_PAGE)


def _check_filter(condition: Any) -> None:
    """A filter is a dict; every '$' key in it, however deep, is a known operator (checked
    before any document is read, so a bad filter fails on an empty store too)."""
    if not isinstance(condition, dict):
        raise ValidationError(f"filter must be a dict, got {type(condition).__name__}")
    for key, value in condition.items():
        if str(key).startswith("$") and key not in _OPERATORS:
            raise ValidationError(f"filter operator must be one of {', '.join(_OPERATORS)}, "
                                  f"got {shown(key):.40}")
        if isinstance(value, dict):
            _check_filter(value)


def matches(value: Any, condition: Any) -> bool:
    """Whether a JSON ``value`` matches a filter ``condition``: equal, field by field for a
    dict, or by the operators of a dict whose keys start with '$'."""
    if isinstance(condition, dict):
        if any(str(k).startswith("$") for k in condition):
            return all(_compare(value, op, operand) for op, operand in condition.items())
        return isinstance(value, dict) and all(
            matches(value.get(k), v) for k, v in condition.items())
    return bool(value == condition)


def _compare(value: Any, operator: str, operand: Any) -> bool:
    if operator not in _OPERATORS:
        raise ValidationError(f"filter operator must be one of {', '.join(_OPERATORS)}, "
                              f"got {shown(operator):.40}")
    if operator == "$eq":
        return bool(value == operand)
    if operator == "$ne":
        return bool(value != operand)
    if not _number(value) or not _number(operand):
        return False
    return bool({"$gt": value > operand, "$gte": value >= operand, "$lt": value < operand,
                 "$lte": value <= operand}[operator])


def _number(value: Any) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool)
